"""`previous_response_id` across two gateway replicas that share the response store through a real Redis."""

from __future__ import annotations

import openai
import pytest
import redis.asyncio as redis_async

from tests.api.surfaces.conftest import REDIS_URL
from tests.conftest import sdk


def config(url: str, prefix: str, ttl_s: float = 60) -> dict:
    return {"server": {"drain_timeout_s": 2}, "models": [{"name": "m1", "endpoints": [{"url": url}]}],
            "responses": {"backend": "redis", "redis_url": REDIS_URL, "prefix": prefix, "ttl_s": ttl_s}}


async def test_a_conversation_started_on_one_replica_continues_on_another(upstream, start_gateway, prefix):
    a = await start_gateway(config(upstream.url, prefix))
    b = await start_gateway(config(upstream.url, prefix))
    first = await sdk(a).responses.create(model="m1", input="question one")
    stream = await sdk(b).responses.create(model="m1", input="question two", previous_response_id=first.id,
                                           stream=True)
    second = [e async for e in stream][-1].response
    assert upstream.log.requests[-1]["messages"] == [
        {"role": "user", "content": "question one"}, {"role": "assistant", "content": "hello from upstream-a"},
        {"role": "user", "content": "question two"}]
    third = await sdk(a).responses.create(model="m1", input="question three", previous_response_id=second.id)
    assert [m["content"] for m in upstream.log.requests[-1]["messages"]] == [
        "question one", "hello from upstream-a", "question two", "tok0 tok1 tok2 tok3 tok4 ", "question three"]
    assert (await sdk(b).responses.retrieve(third.id)).output_text == "hello from upstream-a"
    client = redis_async.from_url(REDIS_URL)
    ttl = await client.pttl(prefix + third.id)
    await client.aclose()
    assert 0 < ttl <= 60_000  # bounded retention: Redis' own expiry
    await sdk(b).responses.delete(third.id)
    with pytest.raises(openai.NotFoundError):
        await sdk(a).responses.retrieve(third.id)


async def test_store_false_keeps_nothing(upstream, start_gateway, prefix):
    a = await start_gateway(config(upstream.url, prefix))
    response = await sdk(a).responses.create(model="m1", input="secret", store=False)
    with pytest.raises(openai.NotFoundError):
        await sdk(a).responses.retrieve(response.id)
