"""Stored Responses (`store: true`): what `previous_response_id`, `GET`, `DELETE` and `input_items`
read, kept in shared state so any replica continues a conversation another replica started.

One record per response id (opaque bytes to this module), with a bounded lifetime (`ttl_s`) and, in
memory, a bounded count (oldest out first). The Redis backend keeps each record under
`{prefix}{id}` with Redis' own expiry, so replicas sharing a Redis share the conversations; a Redis
error is a 503 for the request that needs the record, never a wrong answer.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Annotated, Literal, Protocol

import redis.asyncio as redis_async
from pydantic import BaseModel, ConfigDict, Field, model_validator
from redis.exceptions import RedisError

from sits.errors import Overloaded

log = logging.getLogger("sits.responses")


class ResponsesConfig(BaseModel):
    """The `responses:` section (docs/responses-and-messages.md)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["memory", "redis"] = "memory"
    redis_url: str | None = None
    prefix: str = "sits:resp:"
    ttl_s: Annotated[float, Field(gt=0)] = 30 * 24 * 3600.0  # how long a stored response can be continued
    max_entries: Annotated[int, Field(ge=1)] = 10_000  # memory backend only
    max_record_bytes: Annotated[int, Field(ge=1024)] = 8 * 1024 * 1024  # a conversation larger than this is not stored

    @model_validator(mode="after")
    def _redis_needs_url(self) -> ResponsesConfig:
        if self.backend == "redis" and not self.redis_url:
            raise ValueError("responses.redis_url is required when backend is 'redis'")
        return self


class ResponseStore(Protocol):
    async def put(self, response_id: str, record: bytes) -> None: ...

    async def get(self, response_id: str) -> bytes | None: ...

    async def delete(self, response_id: str) -> bool: ...

    async def close(self) -> None: ...


class MemoryResponseStore:
    """This process only (one replica, or tests); bounded in count and age."""

    def __init__(self, ttl_s: float, max_entries: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._max = max_entries
        self._clock = clock
        self._records: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    async def put(self, response_id: str, record: bytes) -> None:
        self._records[response_id] = (self._clock() + self._ttl_s, record)
        self._records.move_to_end(response_id)
        while len(self._records) > self._max:
            self._records.popitem(last=False)

    async def get(self, response_id: str) -> bytes | None:
        found = self._records.get(response_id)
        if found is None:
            return None
        if found[0] <= self._clock():
            del self._records[response_id]
            return None
        return found[1]

    async def delete(self, response_id: str) -> bool:
        return await self.get(response_id) is not None and self._records.pop(response_id, None) is not None

    async def close(self) -> None:
        self._records.clear()


class RedisResponseStore:
    def __init__(self, url: str, prefix: str, ttl_s: float, timeout_s: float = 2.0) -> None:
        self._redis = redis_async.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._prefix = prefix
        self._ttl_ms = int(ttl_s * 1000)

    async def put(self, response_id: str, record: bytes) -> None:
        try:
            await self._redis.set(self._prefix + response_id, record, px=self._ttl_ms)
        except (RedisError, OSError) as exc:
            log.warning("could not store response %s in Redis: %s", response_id, exc)
            raise Overloaded("the response store (Redis) is unavailable; retry, or send store: false",
                             headers=(("retry-after", "1"),)) from None

    async def get(self, response_id: str) -> bytes | None:
        try:
            value = await self._redis.get(self._prefix + response_id)
        except (RedisError, OSError) as exc:
            log.warning("could not read response %s from Redis: %s", response_id, exc)
            raise Overloaded("the response store (Redis) is unavailable; retry later",
                             headers=(("retry-after", "1"),)) from None
        return bytes(value) if value is not None else None

    async def delete(self, response_id: str) -> bool:
        try:
            return bool(await self._redis.delete(self._prefix + response_id))
        except (RedisError, OSError) as exc:
            log.warning("could not delete response %s from Redis: %s", response_id, exc)
            raise Overloaded("the response store (Redis) is unavailable; retry later",
                             headers=(("retry-after", "1"),)) from None

    async def close(self) -> None:
        await self._redis.aclose()


def build_response_store(config: ResponsesConfig) -> ResponseStore:
    if config.backend == "redis":
        assert config.redis_url is not None
        return RedisResponseStore(config.redis_url, config.prefix, config.ttl_s)
    return MemoryResponseStore(config.ttl_s, config.max_entries)
