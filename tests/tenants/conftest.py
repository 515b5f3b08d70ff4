"""Tenants tests: an in-memory key directory and spend list (the store's real ones are tested on their
own), an upstream that reports usage by kind, and gateways started with tenants on."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from aiohttp import web

from sits.app import Gateway
from sits.configuration.gateway import parse_config
from sits.settings import Settings
from tests.loopback_server import LoopbackServer
from sits.tenants.records import KeyRecord, Limits, SpendRecord, TeamRecord, hash_key

KEY_SECRET = "tenants-test-key-secret"
REDIS_URL = "redis://127.0.0.1:6379/0"


class Keys:
    """A KeyDirectory over two dicts."""

    def __init__(self) -> None:
        self.keys: dict[bytes, KeyRecord] = {}
        self.teams: dict[str, TeamRecord] = {}

    def add(self, secret: str, key_id: str, team_id: str = "team-a", **fields: Any) -> KeyRecord:
        record = KeyRecord(key_id=key_id, name=key_id, team_id=team_id,
                           key_hash=hash_key(secret, KEY_SECRET.encode()), **fields)
        self.keys[record.key_hash] = record
        self.teams.setdefault(team_id, TeamRecord(team_id=team_id, name=team_id))
        return record

    def change(self, key: KeyRecord, **fields: Any) -> KeyRecord:
        record = self.keys[key.key_hash] = replace(key, **fields)
        return record

    def by_hash(self, key_hash: bytes) -> KeyRecord | None:
        return self.keys.get(key_hash)

    def team(self, team_id: str) -> TeamRecord | None:
        return self.teams.get(team_id)


class Spend:
    """A SpendSink that keeps every record."""

    def __init__(self) -> None:
        self.records: list[SpendRecord] = []

    def record(self, spend: SpendRecord) -> None:
        self.records.append(spend)

    async def wait_for(self, count: int, within_s: float = 5.0) -> list[SpendRecord]:
        deadline = time.monotonic() + within_s
        while len(self.records) < count:
            assert time.monotonic() < deadline, f"{len(self.records)} spend records, expected {count}"
            await asyncio.sleep(0.02)
        return self.records


class UsageUpstream:
    """An OpenAI-compatible upstream whose `usage` reports cached and reasoning tokens; `delay_s` holds
    each answer (to keep requests in flight)."""

    def __init__(self, prompt_tokens: int = 1000, completion_tokens: int = 500, cached_tokens: int = 0,
                 reasoning_tokens: int = 0) -> None:
        self.usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": cached_tokens},
                      "completion_tokens_details": {"reasoning_tokens": reasoning_tokens}}
        self.delay_s = 0.0
        self.requests = 0
        self.streams_usage = True  # False: a server that never sends a stream's usage, asked or not
        self.bodies: list[dict[str, Any]] = []
        self._server = LoopbackServer()

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def url(self) -> str:
        return self._server.url + "/v1"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/health", self._health)
        await self._server.serve(app)

    async def stop(self) -> None:
        await self._server.stop()

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.requests += 1
        self.bodies.append(body)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if not body.get("stream"):
            return web.json_response({
                "id": "chatcmpl-u", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                "usage": self.usage})
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for i in range(3):
            chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]}
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        if self.streams_usage and (body.get("stream_options") or {}).get("include_usage"):
            last = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"], "choices": [],
                    "usage": self.usage}
            await response.write(b"data: " + orjson.dumps(last) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def tenant_config(upstream_url: str, redis_url: str | None = REDIS_URL, prefix: str | None = None,
                  price: dict[str, float] | None = None, **tenants: Any) -> dict[str, Any]:
    # A generous Redis timeout: on a loaded test machine a slow answer must not look like a lost Redis.
    limits = {"redis_url": redis_url, "key_prefix": prefix or f"sits:test:{uuid.uuid4().hex[:10]}:",
              "redis_timeout_s": 2.0, **tenants.pop("limits", {})}
    return {"server": {"drain_timeout_s": 1},
            "tenants": {"enabled": True, "limits": limits, **tenants},
            "models": [{"name": "m1", "endpoints": [{"url": upstream_url}],
                        "price": price or {"input": 3.0, "cached_input": 0.3, "output": 15.0, "reasoning": 20.0}},
                       {"name": "m2", "endpoints": [{"url": upstream_url}], "cost_per_1k_input": 0.001}],
            "aliases": {"fast": "m2"}}


GatewayStarter = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def usage_upstream() -> AsyncIterator[UsageUpstream]:
    server = UsageUpstream()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def tenant_gateway(tmp_path: Path) -> AsyncIterator[GatewayStarter]:
    started: list[Gateway] = []

    async def start(raw: dict[str, Any], keys: Keys, spend: Spend, *, name: str = "g", port: int = 0,
                    secrets: dict[str, str] | None = None, **parts: Any) -> Gateway:
        settings = Settings(host="127.0.0.1", port=port, data_dir=tmp_path / name, replica_id=name,
                            secrets={"SITS_KEY_SECRET": KEY_SECRET, **(secrets or {})})
        gateway = Gateway(settings, parse_config(raw), rng_seed=7, key_directory=keys, spend_sink=spend, **parts)
        await gateway.start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        await gateway.stop()


def client(gateway: Gateway, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{gateway.bound_port}/v1", api_key=key, max_retries=0)


def unlimited() -> Limits:
    return Limits()
