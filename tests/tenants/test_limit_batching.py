"""When the limiter's script calls go: an admission in its loop turn's call, and a settlement with the next
admission's call rather than in one of its own. Between the limiter and the machine's real Redis sits a
relay that counts the script calls passed on."""

from __future__ import annotations

import asyncio
import uuid

import redis.asyncio as aioredis

from sits.tenants.limit_scripts import BATCH
from sits.tenants.limit_plan import CONCURRENCY, Check, Reservation
from sits.tenants.limiter import Limiter
from sits.tenants.redis_wire import RedisWire
from tests.tenants.conftest import REDIS_URL

_CALL = b"$7\r\nEVALSHA\r\n"


class CountingRelay:
    """A TCP relay to the machine's Redis that counts the script calls it passes on."""

    def __init__(self) -> None:
        self.calls = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        redis_reader, redis_writer = await asyncio.open_connection("127.0.0.1", 6379)

        async def replies() -> None:
            while data := await redis_reader.read(65536):
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


async def test_a_settlement_rides_with_the_next_admission_and_gives_its_lease_back():
    plain = aioredis.from_url(REDIS_URL)
    await plain.script_load(BATCH.source)  # loaded: the first call is the script call itself
    relay = CountingRelay()
    await relay.start()
    limiter = Limiter(RedisWire(f"redis://127.0.0.1:{relay.port}/0"), lambda: ["replica-a"],  # type: ignore[arg-type]
                      credit_s=None)  # every admission on Redis: the batching of per-request calls
    key = f"sits:test:{uuid.uuid4().hex}:c"
    try:
        plan = limiter.plan([Check(CONCURRENCY, "key", key, 100)])
        admitted = await asyncio.wait_for(limiter.admit(plan, 0, 0), 5)
        assert isinstance(admitted, Reservation) and relay.calls == 1
        limiter.settle(admitted, 0, 0)  # the lease back: with the next call, not one of its own
        again = await asyncio.wait_for(limiter.admit(plan, 0, 0), 5)
        assert isinstance(again, Reservation) and relay.calls == 2
        assert await plain.zrange(key, 0, -1) == [limiter.lease_id(again).encode()]
    finally:
        await limiter.close()
        await relay.close()
        await plain.delete(key)
        await plain.aclose()
