"""One script call on its way at a time: what a replica asks while a call is in flight goes in the next
call, sent when the first answers. Between the limiter and the machine's real Redis sits a relay that
holds Redis's replies until the test lets them through, so what is sent when is told by the test, not by
how fast Redis answers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis

from sits.tenants.limit_scripts import BATCH
from sits.tenants.limiter import CONCURRENCY, RATE, Check, Limiter, Reservation
from sits.tenants.redis_wire import RedisWire
from tests.tenants.conftest import REDIS_URL

_CALL = b"$7\r\nEVALSHA\r\n"


class HeldReplies:
    """A TCP relay to Redis that passes commands on at once and replies only while not held."""

    def __init__(self) -> None:
        self.calls = 0  # script calls the relay has passed on
        self.held = True
        self._waiting: list[tuple[asyncio.StreamWriter, bytes]] = []
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def release(self) -> None:
        """Let every held reply through, and the later ones as they come."""
        self.held = False
        for writer, data in self._waiting:
            writer.write(data)
        self._waiting.clear()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        redis_reader, redis_writer = await asyncio.open_connection("127.0.0.1", 6379)

        async def replies() -> None:
            while data := await redis_reader.read(65536):
                if self.held:
                    self._waiting.append((client_writer, data))
                else:
                    client_writer.write(data)

        relay = asyncio.create_task(replies())
        sent = bytearray()  # all the limiter wrote (a test's few calls): a call cut across reads counts once
        try:
            while data := await client_reader.read(65536):
                sent += data
                self.calls = sent.count(_CALL)
                redis_writer.write(data)
        finally:
            relay.cancel()
            redis_writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()


@asynccontextmanager
async def _held() -> AsyncIterator[tuple[Limiter, HeldReplies, str]]:
    plain = aioredis.from_url(REDIS_URL)
    await plain.script_load(BATCH.source)  # loaded: the first call is the script call itself
    relay = HeldReplies()
    await relay.start()
    limiter = Limiter(RedisWire(f"redis://127.0.0.1:{relay.port}/0"), lambda: ["replica-a"])  # type: ignore[arg-type]
    prefix = f"sits:test:{uuid.uuid4().hex}:"
    try:
        yield limiter, relay, prefix
    finally:
        relay.release()
        await limiter.close()
        await relay.close()
        for key in await plain.keys(prefix + "*"):
            await plain.delete(key)
        await plain.aclose()


async def _until(condition: object, what: str) -> None:
    for _ in range(500):  # bounded: 5 s
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


async def test_what_comes_while_a_call_is_in_flight_goes_in_one_call_when_it_answers():
    async with _held() as (limiter, relay, prefix):
        plan = limiter.plan([Check(RATE, "key", prefix + "r", 100_000), Check(CONCURRENCY, "key", prefix + "c", 100)])
        first = limiter.reserve(plan, 0, 0)
        assert isinstance(first, asyncio.Future)
        await _until(lambda: relay.calls == 1, "the first call sent")
        later = []
        for _ in range(3):  # three more requests, each in a loop turn of its own, while the first call waits
            later.append(limiter.reserve(plan, 0, 0))
            await asyncio.sleep(0)
        await asyncio.sleep(0.05)  # time enough for a call to reach the relay, were one sent
        assert relay.calls == 1 and not first.done()
        relay.release()
        outcomes = [await asyncio.wait_for(f, 5) for f in (first, *later)]  # type: ignore[arg-type]
        assert relay.calls == 2  # the three went together, in one call
        assert all(isinstance(o, Reservation) for o in outcomes)
        assert len({limiter.lease_id(o) for o in outcomes}) == 4  # type: ignore[arg-type]
        plain = aioredis.from_url(REDIS_URL)
        assert await plain.zcard(prefix + "c") == 4  # each its own lease, numbered in the call's order
        await plain.aclose()


async def test_an_idle_replica_sends_a_request_at_once_and_settlements_ride_with_the_next_call():
    async with _held() as (limiter, relay, prefix):
        relay.release()
        plan = limiter.plan([Check(CONCURRENCY, "key", prefix + "c", 100)])
        admitted = await asyncio.wait_for(limiter.admit(plan, 0, 0), 5)
        assert isinstance(admitted, Reservation) and relay.calls == 1
        limiter.settle(admitted, 0, 0)  # the lease back: with the next call, not one of its own
        again = await asyncio.wait_for(limiter.admit(plan, 0, 0), 5)
        assert isinstance(again, Reservation) and relay.calls == 2
        plain = aioredis.from_url(REDIS_URL)
        assert await plain.zrange(prefix + "c", 0, -1) == [limiter.lease_id(again).encode()]
        await plain.aclose()
