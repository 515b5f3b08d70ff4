"""`sits chat`: one question through a gateway, the answer streamed to the terminal.

With no gateway listening at the default address it starts the embedded one
in-process for the duration of the question.
"""

from __future__ import annotations

import os
import sys

import aiohttp
import orjson

DEFAULT_URL = "http://127.0.0.1:8080"


def chat(question: str, base_url: str | None, model: str, max_tokens: int) -> int:
    import uvloop

    return uvloop.run(_chat(question, base_url, model, max_tokens))


async def _chat(question: str, base_url: str | None, model: str, max_tokens: int) -> int:
    url = base_url or DEFAULT_URL
    try:
        return await _ask(url, question, model, max_tokens)
    except aiohttp.ClientConnectorError:
        if base_url is not None:
            print(f"sits chat: no gateway at {url}", file=sys.stderr)
            return 1
    print("(no gateway running: starting the embedded one for this question)", file=sys.stderr)
    from sits.app import Gateway
    from sits.configuration.embedded_default import embedded_default_config
    from sits.settings import Settings

    gateway = Gateway(Settings.from_env(os.environ).with_overrides(port=0), embedded_default_config())
    await gateway.start()
    try:
        return await _ask(f"http://127.0.0.1:{gateway.bound_port}", question, model, max_tokens)
    finally:
        await gateway.stop()


async def _ask(url: str, question: str, model: str, max_tokens: int) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": question}], "stream": True,
            "max_tokens": max_tokens}
    async with aiohttp.ClientSession() as session, session.post(f"{url}/v1/chat/completions", json=body) as resp:
        if resp.status != 200:
            print(f"sits chat: HTTP {resp.status}: {await resp.text()}", file=sys.stderr)
            return 1
        model_name = resp.headers.get("x-sits-model", "?")
        route = resp.headers.get("x-sits-route", "")
        async for line in resp.content:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            event = orjson.loads(line[6:])
            if "error" in event:
                print(f"\nsits chat: stream failed: {event['error'].get('message')}", file=sys.stderr)
                return 1
            for choice in event.get("choices", []):
                sys.stdout.write((choice.get("delta") or {}).get("content") or "")
                sys.stdout.flush()
        print(f"\n[answered by {model_name}; {route}]", file=sys.stderr)
    return 0

