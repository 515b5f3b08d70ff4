"""Every error of the key gate through the official openai SDK against a real gateway: 401 (missing,
unknown, revoked, expired key), 403 (model not allowed, listing what is), 429 for each limit kind
with Retry-After and the limit named; and what an admitted request leaves: a spend record with key,
team and end user, never the key itself."""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp
import openai
import pytest

from sits.tenants.records import Budget, Limits
from tests.tenants.conftest import Keys, Spend, client, tenant_config


async def _chat(c: openai.AsyncOpenAI, model: str = "m1", **kw):  # type: ignore[no-untyped-def]
    return await c.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "hello"}], **kw)


async def test_unknown_revoked_expired_and_missing_keys_get_401(usage_upstream, tenant_gateway):
    keys, spend = Keys(), Spend()
    good = keys.add("sk-good", "key_good")
    keys.add("sk-revoked", "key_revoked", revoked_at=time.time() - 5)
    keys.add("sk-expired", "key_expired", expires_at=time.time() - 5)
    keys.add("sk-rotated", "key_rotated", valid_until=time.time() - 1)
    gateway = await tenant_gateway(tenant_config(usage_upstream.url), keys, spend)
    async with client(gateway, "sk-good") as c:
        ok = await _chat(c)
        assert ok.http_response.status_code == 200
    for secret, words in (("sk-unknown", "invalid API key"), ("sk-revoked", "key_revoked is revoked"),
                          ("sk-expired", "key_expired is expired"), ("sk-rotated", "rotated out")):
        async with client(gateway, secret) as c:
            with pytest.raises(openai.AuthenticationError) as caught:
                await _chat(c)
        assert caught.value.status_code == 401
        assert words in caught.value.message
        assert caught.value.code == "invalid_api_key"
    async with aiohttp.ClientSession() as s:  # no Authorization header at all
        async with s.post(f"http://127.0.0.1:{gateway.bound_port}/v1/chat/completions",
                          json={"model": "m1", "messages": []}) as r:
            assert r.status == 401
            assert (await r.json())["error"]["type"] == "authentication_error"
    # a revocation reaches the next request (the directory is what the store refreshes)
    keys.change(good, revoked_at=time.time())
    async with client(gateway, "sk-good") as c:
        with pytest.raises(openai.AuthenticationError):
            await _chat(c)
    assert usage_upstream.requests == 1


async def test_a_model_the_key_may_not_use_is_403_listing_what_it_may(usage_upstream, tenant_gateway):
    keys, spend = Keys(), Spend()
    keys.add("sk-narrow", "key_narrow", allowed_models=("m2", "gpt-*"))
    gateway = await tenant_gateway(tenant_config(usage_upstream.url), keys, spend)
    async with client(gateway, "sk-narrow") as c:
        with pytest.raises(openai.PermissionDeniedError) as caught:
            await _chat(c, "m1")
        assert caught.value.status_code == 403
        assert "m2, gpt-*" in caught.value.message and "key_narrow" in caught.value.message
        assert caught.value.code == "model_not_allowed"
        assert (await _chat(c, "m2")).http_response.status_code == 200
        # an alias is allowed when the model it points to is
        assert (await _chat(c, "fast")).http_response.status_code == 200
    assert usage_upstream.requests == 2
    metrics = await _metrics(gateway)
    assert 'sits_tenant_requests_total{model="m1",outcome="forbidden",team="team-a"} 1.0' in metrics


@pytest.mark.parametrize("limits,expect", [
    (Limits(rpm=2), "rpm"),
    (Limits(tpm=3000), "tpm"),  # each request reserves ~2+1024 tokens, settles at 1500
])
async def test_rate_limits_answer_429_with_retry_after_and_the_limit(usage_upstream, tenant_gateway, limits, expect):
    keys, spend = Keys(), Spend()
    keys.add("sk-limited", "key_limited", limits=limits)
    gateway = await tenant_gateway(tenant_config(usage_upstream.url), keys, spend)
    async with client(gateway, "sk-limited") as c:
        admitted = 0
        with pytest.raises(openai.RateLimitError) as caught:
            for _ in range(10):
                await _chat(c)
                admitted += 1
    assert admitted == 2
    error = caught.value
    assert error.status_code == 429
    assert error.code == "rate_limit_exceeded"
    assert error.body["param"] == expect
    assert f"limit: {expect}" in error.message and "resets at" in error.message
    headers = error.response.headers
    assert headers["x-sits-limit"] == expect and headers["x-sits-limit-scope"] == "key"
    assert 1 <= int(headers["retry-after"]) <= 60
    assert headers["x-ratelimit-reset"].endswith("Z")


async def test_concurrency_limit_answers_429_while_requests_are_in_flight(usage_upstream, tenant_gateway):
    keys, spend = Keys(), Spend()
    team = keys.add("sk-c", "key_c", team_id="team-c").team_id
    keys.teams[team] = keys.teams[team].__class__(team_id=team, name=team, limits=Limits(concurrency=2))
    gateway = await tenant_gateway(tenant_config(usage_upstream.url), keys, spend)
    usage_upstream.delay_s = 0.5
    async with client(gateway, "sk-c") as c:
        results = await asyncio.gather(*(_chat(c) for _ in range(4)), return_exceptions=True)
        refused = [r for r in results if isinstance(r, openai.RateLimitError)]
        assert len(refused) == 2 and len(results) - len(refused) == 2
        assert refused[0].body["param"] == "concurrency"
        assert refused[0].response.headers["x-sits-limit-scope"] == "team"
        assert refused[0].response.headers["retry-after"] == "1"
        usage_upstream.delay_s = 0
        # the slots came back when the requests ended
        assert (await _chat(c)).http_response.status_code == 200
        assert (await _chat(c)).http_response.status_code == 200


async def test_a_request_refused_for_its_own_bad_input_takes_no_limit(usage_upstream, tenant_gateway):
    # A malformed x-sits-sla-ms is a 422 before any counter is taken: with one slot of concurrency, the
    # requests after it are admitted (a slot taken and never given back would refuse them for the lease's
    # life), and nothing reached the upstream or was spent.
    keys, spend = Keys(), Spend()
    keys.add("sk-one", "key_one", limits=Limits(concurrency=1))
    gateway = await tenant_gateway(tenant_config(usage_upstream.url), keys, spend)
    async with client(gateway, "sk-one") as c:
        for _ in range(3):
            with pytest.raises(openai.UnprocessableEntityError) as caught:
                await _chat(c, extra_headers={"x-sits-sla-ms": "soon"})
            assert caught.value.status_code == 422 and "x-sits-sla-ms" in caught.value.message
        assert usage_upstream.requests == 0
        assert (await _chat(c)).http_response.status_code == 200
        assert (await _chat(c)).http_response.status_code == 200


async def test_a_spent_hard_budget_is_429_budget_and_a_soft_one_warns(usage_upstream, tenant_gateway, caplog):
    keys, spend = Keys(), Spend()
    # m1: 1000 in at $3/M + 500 out at $15/M = $0.0105 a request
    keys.add("sk-b", "key_b", budget=Budget("daily", hard_usd=0.02, soft_usd=0.01))
    gateway = await tenant_gateway(tenant_config(usage_upstream.url), keys, spend)
    caplog.set_level(logging.WARNING, "sits.tenants")
    async with client(gateway, "sk-b") as c:
        first = await _chat(c, max_tokens=10)
        assert "x-sits-budget-warning" not in first.http_response.headers
        await spend.wait_for(1)
        await asyncio.sleep(0.2)  # the settlement is batched off the request path
        second = await _chat(c, max_tokens=10)
        assert "soft budget" in second.http_response.headers["x-sits-budget-warning"]
        await spend.wait_for(2)
        await asyncio.sleep(0.2)
        with pytest.raises(openai.RateLimitError) as caught:
            await _chat(c, max_tokens=10)
    error = caught.value
    assert error.code == "budget_exceeded" and error.body["param"] == "budget"
    assert error.response.headers["x-sits-limit"] == "budget"
    retry = int(error.response.headers["retry-after"])
    assert 0 < retry <= 86_400  # the end of the UTC day
    assert "soft budget passed" in caplog.text and "sk-b" not in caplog.text


async def test_spend_records_carry_key_team_user_and_the_key_class_feeds_admission(usage_upstream, tenant_gateway,
                                                                                caplog):
    keys, spend = Keys(), Spend()
    keys.add("sk-batch", "key_batch", team_id="team-x", priority="batch")
    raw = tenant_config(usage_upstream.url)
    raw["telemetry"] = {"logs": {"access_log": True}}
    gateway = await tenant_gateway(raw, keys, spend)
    gate = gateway.tenant_gate
    assert gate is not None
    caplog.set_level(logging.INFO, "sits.access")
    async with client(gateway, "sk-batch") as c:
        await _chat(c, user="end-user-7")
        await c.chat.completions.create(model="m1", messages=[{"role": "user", "content": "x"}],
                                        extra_headers={"x-sits-user": "header-user"})
    records = await spend.wait_for(2)
    assert [r.user for r in records] == ["end-user-7", "header-user"]
    assert {(r.key_id, r.team_id, r.model, r.status) for r in records} == {("key_batch", "team-x", "m1", 200)}
    assert records[0].endpoint == "m1/ep-0" and records[0].latency_ms > 0
    access = [r for r in caplog.records if r.name == "sits.access"]
    assert [(getattr(r, "key_id", None), getattr(r, "team", None)) for r in access] == [("key_batch", "team-x")] * 2
    assert not any("sk-batch" in str(v) for r in access for v in vars(r).values())
    # the key's class: batch is P2 for admission
    from sits.api.http_types import HttpRequest
    request = HttpRequest("POST", "/v1/chat/completions", "", {"authorization": "Bearer sk-batch"}, b"")
    gate.before(request, "/v1/chat/completions")
    assert gate.key_class(request) == 2
    assert gate.warning(request) is None  # a key without a soft budget earns no warning
    metrics = await _metrics(gateway)
    assert 'sits_tenant_requests_total{model="m1",outcome="admitted",team="team-x"} 2.0' in metrics
    assert 'sits_tenant_spend_usd_total{model="m1",team="team-x"}' in metrics
    assert "sits_limits_shared 1.0" in metrics
    # both requests went through admission as class 2 (batch), the key's class
    assert 'sits_admission_queue_wait_seconds_count{priority="2"} 2.0' in metrics
    assert "sk-batch" not in metrics


async def _metrics(gateway) -> str:  # type: ignore[no-untyped-def]
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{gateway.bound_port}/metrics") as r:
            return await r.text()


async def test_tenants_refuse_to_start_beside_doors_that_skip_the_gate_or_with_a_bad_redis_url(usage_upstream,
                                                                                              tenant_gateway):
    from sits.errors import ConfigError

    raw = tenant_config(usage_upstream.url)
    raw["server"]["epp_port"] = 0  # the gRPC door checks keys (test_grpc_keys.py); the endpoint picker cannot
    with pytest.raises(ConfigError, match="epp_port"):
        await tenant_gateway(raw, Keys(), Spend())
    raw = tenant_config(usage_upstream.url, limits={"redis_url": "http://127.0.0.1:6379"})
    with pytest.raises(ConfigError, match="tenants.limits.redis_url"):
        await tenant_gateway(raw, Keys(), Spend())


async def test_the_responses_surface_passes_the_same_gate(usage_upstream, tenant_gateway):
    keys, spend = Keys(), Spend()
    keys.add("sk-r", "key_r", allowed_models=("m1",), limits=Limits(rpm=1))
    gateway = await tenant_gateway(tenant_config(usage_upstream.url), keys, spend)
    async with client(gateway, "sk-r") as c:
        answer = await c.responses.create(model="m1", input="hello", store=False)
        assert answer.output_text
        with pytest.raises(openai.PermissionDeniedError):
            await c.responses.create(model="m2", input="hello", store=False)
        with pytest.raises(openai.RateLimitError) as caught:
            await c.responses.create(model="m1", input="hello", store=False)
    assert caught.value.response.headers["x-sits-limit"] == "rpm"
    records = await spend.wait_for(3)
    assert [(r.model, r.status) for r in records] == [("m1", 200), ("m2", 403), ("m1", 429)]
    assert records[0].cost_usd > 0
