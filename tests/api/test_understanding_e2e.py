"""Model "auto" with request understanding on: intent routes and the x-sits-intent header."""

from __future__ import annotations

from tests.conftest import sdk


async def test_intent_route_picks_the_model_and_says_why(upstream, upstream_b, start_gateway):
    config = {
        "server": {"drain_timeout_s": 2},
        "understanding": {"enabled": True, "embedder": "charngram",
                          "routes": [{"intent": "coding", "model": "coder", "min_confidence": 0.5}]},
        "models": [{"name": "chat", "tier": "tiny", "endpoints": [{"url": upstream.url}]},
                   {"name": "coder", "tier": "base", "endpoints": [{"url": upstream_b.url}]}],
    }
    gateway = await start_gateway(config)
    client = sdk(gateway)
    code = await client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Fix this Python function:\n```python\ndef f(x):\n"
                                                            "    return x +\n```"}])
    assert code.headers["x-sits-model"] == "coder"
    assert code.headers["x-sits-intent"].startswith("coding; confidence=")
    assert "auto=intent route coding -> coder" in code.headers["x-sits-route"]
    chat = await client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "hello there"}])
    assert chat.headers["x-sits-model"] == "chat"
    assert "x-sits-intent" in chat.headers
