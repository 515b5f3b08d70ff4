"""A model's only endpoint still passes the hard filters: a prompt longer than the model's window is
never sent to it; the client gets the context error or a larger-context model answers, exactly as
when the model has several endpoints. Real gateway, official SDK, real upstreams over loopback."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conftest import sdk

LONG = [{"role": "user", "content": "word " * 2000}]  # ~10,000 characters: about 2,500 tokens by len/4
SHORT = [{"role": "user", "content": "hi"}]


def config(small_urls: list[str], long_url: str | None = None) -> dict[str, Any]:
    models: list[dict[str, Any]] = [
        {"name": "small", "context_window": 1024, "endpoints": [{"url": u} for u in small_urls]}]
    if long_url:
        models.append({"name": "long", "context_window": 131072, "endpoints": [{"url": long_url}]})
    return {"models": models}


@pytest.mark.parametrize("replicas", [1, 2])
async def test_a_too_long_prompt_gets_the_context_error_without_calling_the_model(upstream, start_gateway,
                                                                                  replicas):
    gateway = await start_gateway(config([upstream.url] * replicas))
    with pytest.raises(openai.BadRequestError) as info:
        await sdk(gateway).chat.completions.create(model="small", messages=LONG)
    assert info.value.code == "context_length_exceeded"
    assert info.value.body["param"] == "messages" and "1024 tokens" in info.value.body["message"]
    assert upstream.log.requests == []  # the model whose window is too small was never called


@pytest.mark.parametrize("replicas", [1, 2])
async def test_a_too_long_prompt_goes_to_a_larger_context_model(upstream, upstream_b, start_gateway, replicas):
    gateway = await start_gateway(config([upstream.url] * replicas, upstream_b.url))
    raw = await sdk(gateway).chat.completions.with_raw_response.create(model="small", messages=LONG)
    assert raw.headers["x-sits-model"] == "long"
    assert raw.headers["x-sits-attempts"] == "long/ep-0:ok"
    assert "reason=no endpoint passed context-window-filter" in raw.headers["x-sits-route"]
    assert upstream.log.requests == [] and len(upstream_b.log.requests) == 1


async def test_a_prompt_that_fits_is_routed_to_the_only_endpoint_by_the_scheduler(upstream, start_gateway):
    gateway = await start_gateway(config([upstream.url]))
    raw = await sdk(gateway).chat.completions.with_raw_response.create(model="small", messages=SHORT)
    assert raw.headers["x-sits-route"] == "profile=default; pick=small/ep-0; reason=only endpoint"
    assert len(upstream.log.requests) == 1
