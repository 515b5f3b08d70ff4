"""Replication through Redis: deltas on a pub/sub channel (fast, may be lost), plus periodic
anti-entropy through a hash holding every replica's full document (slow, repairs every loss).

Layout under `namespace` (default "sits:cluster"):

- `{namespace}:deltas`  pub/sub channel: every local change, as a delta document
- `{namespace}:state`   hash: replica id -> that replica's full document

Redis may come and go: while it is away the replica serves from its own document, deltas pile
up merged into one (bounded), and the first anti-entropy round after it is back converges
everyone, including replicas whose hash entries were lost with a Redis restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import redis.asyncio as redis_async
from redis.exceptions import RedisError

from sits.runtime.tasks import cancel_and_wait
from sits.state.replication.outbox import CoalescingOutbox
from sits.state.replication.replica import Replica
from sits.state.replication.wire import WireError, decode, encode

log = logging.getLogger("sits.cluster")

NAME = "redis"
_RETRY_S = 0.5  # between reconnect attempts; short so a healed partition converges quickly


class RedisTransport:
    def __init__(self, replica: Replica, url: str, namespace: str, anti_entropy_s: float,
                 timeout_s: float = 1.0) -> None:
        self._replica = replica
        self._url = url
        self._channel = f"{namespace}:deltas"
        self._hash = f"{namespace}:state"
        self._anti_entropy_s = anti_entropy_s
        self._timeout_s = timeout_s
        self._outbox = CoalescingOutbox()
        self._resync = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._client: redis_async.Redis | None = None
        self.connected = False
        replica.add_outbox(self._outbox.put)

    async def start(self) -> None:
        self._client = redis_async.Redis.from_url(
            self._url, socket_timeout=self._timeout_s, socket_connect_timeout=self._timeout_s)
        self._tasks = [
            asyncio.create_task(self._publish_loop(), name="sits-cluster-redis-publish"),
            asyncio.create_task(self._subscribe_loop(), name="sits-cluster-redis-subscribe"),
            asyncio.create_task(self._anti_entropy_loop(), name="sits-cluster-redis-anti-entropy"),
        ]

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        if self._client is not None:
            await self._client.aclose()

    async def _publish_loop(self) -> None:
        assert self._client is not None
        while True:
            delta = await self._outbox.take()
            try:
                await self._client.publish(self._channel, encode(delta, self._replica.id))
            except (RedisError, OSError) as exc:
                # Not retried: the next anti-entropy round carries the full document anyway.
                log.debug("cluster delta not published (%s); anti-entropy will carry it", exc)

    async def _subscribe_loop(self) -> None:
        while True:
            client = pubsub = None
            try:
                client = redis_async.Redis.from_url(self._url, socket_connect_timeout=self._timeout_s)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                await pubsub.subscribe(self._channel)
                self._resync.set()  # (re)subscribed: catch up on what was missed meanwhile
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None and message.get("type") == "message":
                        self._on_message(message["data"])
            except (RedisError, OSError) as exc:
                log.debug("cluster subscription lost (%s); retrying", exc)
            finally:
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.aclose()
            await asyncio.sleep(_RETRY_S)

    def _on_message(self, data: bytes) -> None:
        try:
            origin, doc = decode(data)
        except WireError as exc:
            self._replica.rejected += 1
            log.warning("dropped a cluster delta: %s", exc)
            return
        if origin != self._replica.id:
            self._replica.receive(doc, NAME)

    async def _anti_entropy_loop(self) -> None:
        assert self._client is not None
        while True:
            try:
                await self._client.hset(self._hash, self._replica.id, encode(self._replica.doc, self._replica.id))
                documents = await self._client.hgetall(self._hash)
                for field, data in documents.items():
                    if field.decode(errors="replace") != self._replica.id:
                        self._on_message(data)
                self._replica.note_sync(NAME)
                if not self.connected:
                    log.info("cluster: redis %s reachable; in sync", self._url)
                self.connected = True
            except (RedisError, OSError) as exc:
                if self.connected:
                    log.warning("cluster: redis unreachable (%s); serving from local state", exc)
                self.connected = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._resync.wait(), self._anti_entropy_s if self.connected else _RETRY_S)
            self._resync.clear()
