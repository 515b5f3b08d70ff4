"""Replication straight between gateways over HTTP, for sites without Redis.

Push-pull anti-entropy: every `interval_s` a replica POSTs its full document to each peer's
`/v1/cluster/sync` and merges the peer's full document from the answer. Local changes are
pushed to every peer at once as deltas (best effort: a lost push is repaired by the next round).
Peers authenticate with the admin key.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from sits.runtime.tasks import cancel_and_wait
from sits.state.replication.document import ClusterDoc
from sits.state.replication.outbox import CoalescingOutbox
from sits.state.replication.replica import Replica
from sits.state.replication.wire import WireError, decode, encode

log = logging.getLogger("sits.cluster")

NAME = "http"
SYNC_PATH = "/v1/cluster/sync"


class HttpPeerTransport:
    def __init__(self, replica: Replica, peers: list[str], token: str | None, interval_s: float,
                 timeout_s: float = 1.0) -> None:
        self._replica = replica
        self._peers = [p.rstrip("/") for p in peers]
        self._headers = {"content-type": "application/json"}
        if token:
            self._headers["authorization"] = f"Bearer {token}"
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._outbox = CoalescingOutbox()
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.reachable: dict[str, bool] = dict.fromkeys(self._peers, False)
        replica.add_outbox(self._outbox.put)

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        self._tasks = [
            asyncio.create_task(self._push_loop(), name="sits-cluster-http-push"),
            asyncio.create_task(self._anti_entropy_loop(), name="sits-cluster-http-anti-entropy"),
        ]

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        if self._session is not None:
            await self._session.close()

    async def _push_loop(self) -> None:
        while True:
            delta = await self._outbox.take()
            await asyncio.gather(*(self._exchange(peer, delta) for peer in self._peers))

    async def _anti_entropy_loop(self) -> None:
        while True:
            results = await asyncio.gather(*(self._exchange(peer, self._replica.doc) for peer in self._peers))
            if any(results):
                self._replica.note_sync(NAME)
            await asyncio.sleep(self._interval_s)

    async def _exchange(self, peer: str, doc: ClusterDoc) -> bool:
        """Send `doc`, merge the peer's full document from the answer; False if the peer is unreachable."""
        assert self._session is not None
        try:
            async with self._session.post(peer + SYNC_PATH, data=encode(doc, self._replica.id),
                                          headers=self._headers) as response:
                body = await response.read()
                if response.status != 200:
                    log.warning("cluster peer %s refused a sync: HTTP %d %s", peer, response.status, body[:200])
                    return False
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            if self.reachable.get(peer):
                log.warning("cluster peer %s unreachable (%s); serving from local state", peer, exc)
            self.reachable[peer] = False
            return False
        self.reachable[peer] = True
        try:
            _, remote = decode(body)
        except WireError as exc:
            self._replica.rejected += 1
            log.warning("cluster peer %s answered a bad document: %s", peer, exc)
            return False
        self._replica.receive(remote, NAME)
        return True
