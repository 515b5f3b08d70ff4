"""Moving conversations' KV caches between llama.cpp instances of the same model (docs/kv-cache.md).

When an endpoint leaves a model (removed from the registry, its model's endpoints replaced), the
conversations it holds would start over on the instances that take its prefixes: a whole re-prefill of
each history. With `kv_migration.enabled`, SITS saves the draining instance's hot slots (those caching at
least `min_tokens` prompt tokens, longest first) to files and restores each into an idle slot of a
surviving instance, so the next turn there finds its prefix cached. `POST /v1/kv/migrate` does the same
on an operator's call, without draining anything.

Constraints: both servers must run with `--slot-save-path` on one folder they both see (the file is
written by the source server and read by the target server; same host or a shared volume). A llama.cpp
slot does not say which conversation it holds, so the caches are spread over the survivors' idle slots
(empty ones first, then those caching less than the migrated one): with one survivor - two instances -
every conversation lands where its next turn goes; with more, a conversation lands on the instance its
prefix moves to only by chance, unless the operator names the target. Best effort: a failure skips that
slot (the next turn re-prefills, as without migration) and is reported, never raised to traffic.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from sits.backends.llama_cpp_slots import LlamaCppSlots
from sits.control.config import KvMigrationConfig
from sits.errors import SitsError, SlotActionsUnsupported
from sits.runtime.tasks import cancel_and_wait
from sits.state.routing_table import Endpoint, RoutingTable

log = logging.getLogger("sits.kv_migration")

KEPT_REPORTS = 32


@dataclass(frozen=True, slots=True)
class MovedSlot:
    source_slot: int
    target: str
    target_slot: int
    tokens: int
    bytes: int
    save_ms: float  # the servers' own file write and read times
    restore_ms: float
    seconds: float  # the whole move as SITS saw it (both calls, waits for a busy slot included)


@dataclass(frozen=True, slots=True)
class MigrationReport:
    source: str
    reason: str  # "drain" or "operator"
    moved: tuple[MovedSlot, ...]
    skipped: tuple[str, ...]  # why each hot slot (or the whole source) was not moved
    seconds: float

    def to_json(self) -> dict[str, object]:
        return asdict(self)


class KvMigrator:
    def __init__(self, slots: LlamaCppSlots, config: KvMigrationConfig, clock: Callable[[], float]) -> None:
        self._slots = slots
        self._config = config
        self._clock = clock
        self._tasks: set[asyncio.Task[MigrationReport]] = set()
        self.reports: deque[MigrationReport] = deque(maxlen=KEPT_REPORTS)

    def table_changed(self, old: RoutingTable | None, new: RoutingTable) -> None:
        """Start moving the caches of every endpoint that left a model still served by other endpoints."""
        if old is None:
            return
        for name, model in old.models.items():
            kept = new.models.get(name)
            if kept is None or not kept.endpoints:
                continue
            kept_ids = {e.id for e in kept.endpoints}
            for gone in model.endpoints:
                if gone.id in kept_ids:
                    continue
                targets = [e for e in kept.endpoints if (e.host, e.port) != (gone.host, gone.port)]
                if targets:
                    task = asyncio.get_running_loop().create_task(self.migrate(gone, targets, "drain"),
                                                                  name=f"sits-kv-migrate-{gone.id}")
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)

    async def idle(self) -> None:
        """Wait for the migrations under way."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def stop(self) -> None:
        await cancel_and_wait(list(self._tasks))

    async def migrate(self, source: Endpoint, targets: Sequence[Endpoint], reason: str = "operator") -> MigrationReport:
        started = self._clock()
        moved: list[MovedSlot] = []
        skipped: list[str] = []
        try:
            await self._migrate(source, targets, moved, skipped)
        except SitsError as exc:
            skipped.append(f"{source.id}: {exc.message}")
        report = MigrationReport(source.id, reason, tuple(moved), tuple(skipped), self._clock() - started)
        self.reports.append(report)
        log.info("kv migration from %s (%s): %d slots moved (%d tokens) in %.3fs%s", source.id, reason,
                 len(moved), sum(m.tokens for m in moved), report.seconds,
                 f"; skipped: {'; '.join(skipped)}" if skipped else "")
        return report

    async def _migrate(self, source: Endpoint, targets: Sequence[Endpoint], moved: list[MovedSlot],
                       skipped: list[str]) -> None:
        hot = sorted((s for s in await self._slots.slots(source) if s.cached_tokens >= self._config.min_tokens),
                     key=lambda s: -s.cached_tokens)[:self._config.max_slots]
        if not hot:
            return
        free: list[tuple[int, int, int]] = []  # (tokens cached, slot id, target index): empty slots first, spread
        for i, target in enumerate(targets):
            try:
                free.extend((s.cached_tokens, s.id, i) for s in await self._slots.slots(target) if not s.processing)
            except SitsError as exc:
                skipped.append(f"{target.id}: {exc.message}")
        free.sort()
        for slot in hot:
            place = next((f for f in free if f[0] < slot.cached_tokens), None)
            if place is None:
                skipped.append(f"slot {slot.id} ({slot.cached_tokens} tokens): no idle target slot caching less")
                continue
            free.remove(place)
            target = targets[place[2]]
            filename = f"sits-kv-{uuid.uuid4().hex}.bin"
            began = self._clock()
            try:
                saved = await self._slots.save(source, slot.id, filename)
                restored = await self._slots.restore(target, place[1], filename)
            except SlotActionsUnsupported:
                raise
            except SitsError as exc:
                skipped.append(f"slot {slot.id} -> {target.id}: {exc.message}")
                continue
            finally:
                self._remove(filename)
            moved.append(MovedSlot(slot.id, target.id, place[1], restored.tokens, restored.bytes, saved.ms,
                                   restored.ms, self._clock() - began))

    def _remove(self, filename: str) -> None:
        if self._config.shared_dir is not None:
            try:
                (Path(self._config.shared_dir) / filename).unlink(missing_ok=True)
            except OSError as exc:
                log.warning("could not remove migrated KV cache file %s: %s", filename, exc)
