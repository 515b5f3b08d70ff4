"""A Messages client gets Anthropic-shaped errors everywhere below /v1/messages, through the official
anthropic SDK: the key gate's 401, 403 and 429 (raised before the route runs, Retry-After kept), and
the dispatcher's own 404 and 405."""

from __future__ import annotations

import time

import aiohttp
import anthropic
import pytest

from sits.tenants.records import Limits
from tests.conftest import base_url, one_model_config
from tests.tenants.conftest import Keys, Spend, tenant_config, tenant_gateway, usage_upstream  # noqa: F401

HI = [{"role": "user", "content": "hi"}]


def claude(gateway, key: str) -> anthropic.AsyncAnthropic:  # type: ignore[no-untyped-def]
    return anthropic.AsyncAnthropic(base_url=f"http://127.0.0.1:{gateway.bound_port}", api_key=key, max_retries=0)


async def test_the_key_gate_refuses_in_anthropics_shape(usage_upstream, tenant_gateway):  # noqa: F811
    keys, spend = Keys(), Spend()
    keys.add("sk-ok", "key_ok", allowed_models=("m1",), limits=Limits(rpm=1))
    keys.add("sk-revoked", "key_revoked", revoked_at=time.time() - 5)
    gateway = await tenant_gateway(tenant_config(usage_upstream.url), keys, spend)
    for secret, words in (("sk-unknown", "invalid API key"), ("sk-revoked", "key_revoked is revoked")):
        async with claude(gateway, secret) as c:
            with pytest.raises(anthropic.AuthenticationError) as refused:
                await c.messages.create(model="m1", max_tokens=8, messages=HI)
        assert refused.value.body["type"] == "error"  # type: ignore[index]
        assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
        assert words in refused.value.message
    async with claude(gateway, "sk-ok") as c:
        with pytest.raises(anthropic.PermissionDeniedError) as denied:
            await c.messages.create(model="m2", max_tokens=8, messages=HI)
        assert denied.value.body["error"]["type"] == "permission_error"  # type: ignore[index]
        assert "m2" in denied.value.message
        answer = await c.messages.create(model="m1", max_tokens=8, messages=HI)
        assert answer.content[0].text  # type: ignore[union-attr]
        with pytest.raises(anthropic.RateLimitError) as limited:
            await c.messages.create(model="m1", max_tokens=8, messages=HI)
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert int(limited.value.response.headers["retry-after"]) >= 1


async def test_unknown_paths_and_methods_below_messages_are_anthropic_errors(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url, api_keys_env="SITS_KEYS"), secrets={"SITS_KEYS": "k1"})
    async with anthropic.AsyncAnthropic(base_url=base_url(gateway), api_key="k1", max_retries=0) as c:
        with pytest.raises(anthropic.NotFoundError) as missing:
            await c.get("/v1/messages/batches", cast_to=object)
    assert missing.value.body == {"type": "error", "error": {"type": "not_found_error",  # type: ignore[comparison-overlap]
                                                             "message": "no route for GET /v1/messages/batches"}}
    async with aiohttp.ClientSession() as s:
        async with s.get(base_url(gateway) + "/v1/messages", headers={"x-api-key": "k1"}) as r:
            assert r.status == 405
            assert (await r.json())["type"] == "error"
        async with s.get(base_url(gateway) + "/v1/models") as r:  # other paths keep OpenAI's shape
            assert r.status == 401 and (await r.json())["error"]["type"] == "authentication_error"
