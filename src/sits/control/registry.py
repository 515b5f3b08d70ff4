"""The model registry: the control plane's source of truth, hot-plugged at runtime.

Every change is validated whole (schema, URL guard, a trial routing table), then
persisted (acknowledged only after the SQLite commit), then applied by swapping in a
new immutable routing table. A change either lands entirely or not at all.

Precedence: models from the static config (YAML, `--backend`, the embedded default)
are fixed; the control API adds its own. A runtime registration may not take a config
model's name (409). If a later config file defines a name that the persisted registry
also holds, the persisted registration wins and a warning is logged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sits.backends.address_policy import AddressPolicy, check_url
from sits.control.registration import EndpointRegistration, ModelRegistration, ModelUpdate
from sits.control.registry_records import (
    EndpointRecord,
    ModelRecord,
    endpoint_id,
    record_from_json,
    record_to_json,
)
from sits.control.table_builder import build_routing_table
from sits.errors import Conflict, ModelNotFound, NotFound, PreconditionFailed, SitsError, UnprocessableRequest
from sits.state.endpoint_health import HealthBoard
from sits.state.registry_store import RegistryStore, StaleRegistryVersion
from sits.state.routing_table import RoutingTable
from sits.state.token_price import Price

log = logging.getLogger("sits.registry")


@dataclass(frozen=True, slots=True)
class Change:
    record: ModelRecord | None
    version: int


class Registry:
    def __init__(
        self,
        store: RegistryStore,
        secrets: Mapping[str, str],
        policy: AddressPolicy,
        health: HealthBoard,
        publish: Callable[[RoutingTable], None],
    ) -> None:
        self._store = store
        self._secrets = secrets
        self._policy = policy
        self._health = health
        self._publish = publish
        self._records: dict[str, ModelRecord] = {}
        self._config_records: list[ModelRecord] = []
        self._config_names: set[str] = set()
        self._aliases: dict[str, str] = {}
        self.version = 0
        self._lock = asyncio.Lock()
        # Told of every change made through the control API, after it is applied (replication hook).
        self.on_change: Callable[[dict[str, ModelRecord], set[str]], None] | None = None

    # -- startup -------------------------------------------------------------

    async def load(self, config_records: list[ModelRecord], config_aliases: Mapping[str, str]) -> None:
        self._config_records = list(config_records)
        self._config_names = {r.name for r in config_records}
        self._aliases = dict(config_aliases)
        await self._reload(warn=True)

    async def sync(self) -> bool:
        """Catch up with changes another process sharing the store committed (`sits serve --workers N`:
        a registration through one worker reaches the others). True if there were any."""
        async with self._lock:
            return await self._sync_locked()

    async def _sync_locked(self) -> bool:
        if await asyncio.to_thread(self._store.stored_version) == self.version:
            return False
        await self._reload(warn=False)
        return True

    async def _reload(self, warn: bool) -> None:
        stored = await asyncio.to_thread(self._store.load)
        records = {r.name: r for r in self._config_records}
        for name, data in stored.records.items():
            if warn and name in records:
                log.warning("registered model %r shadows the config model of the same name", name)
            records[name] = record_from_json(data)
        self._apply(records, stored.version)

    # -- reads -----------------------------------------------------------------

    def records(self) -> list[ModelRecord]:
        return list(self._records.values())

    def get(self, name: str) -> ModelRecord:
        record = self._records.get(name)
        if record is None:
            raise ModelNotFound(f"model '{name}' is not registered", param="name")
        return record

    # -- changes -----------------------------------------------------------------

    async def register(self, reg: ModelRegistration, if_match: int | None) -> Change:
        async with self._lock:
            await self._sync_locked()  # another worker process may have changed the store
            self._check_version(if_match)
            if reg.name in self._records:
                raise Conflict(f"model '{reg.name}' already exists; PATCH it or DELETE it first", param="name")
            endpoints = [
                await self._endpoint(endpoint_id(reg.name, i), ep, f"endpoints[{i}]" if reg.endpoints else "endpoint")
                for i, ep in enumerate(reg.endpoint_list())
            ]
            fields = reg.model_dump(exclude={"name", "endpoint", "endpoints", "weight"}, exclude_none=True)
            record = ModelRecord(name=reg.name, endpoints=tuple(endpoints), source="api",
                                 next_endpoint_index=len(endpoints), **_tupled(fields))
            return await self._commit({record.name: record}, set())

    async def update(self, name: str, upd: ModelUpdate, if_match: int | None) -> Change:
        async with self._lock:
            await self._sync_locked()  # another worker process may have changed the store
            self._check_version(if_match)
            record = self._owned(name)
            fields = upd.model_dump(exclude_unset=True)
            record = dataclasses.replace(record, **_tupled(fields))
            return await self._commit({name: record}, set())

    async def remove(self, name: str, if_match: int | None) -> Change:
        async with self._lock:
            await self._sync_locked()  # another worker process may have changed the store
            self._check_version(if_match)
            self._owned(name)
            return await self._commit({}, {name})

    async def add_endpoint(self, name: str, ep: EndpointRegistration, if_match: int | None) -> Change:
        async with self._lock:
            await self._sync_locked()  # another worker process may have changed the store
            self._check_version(if_match)
            record = self._owned(name)
            new = await self._endpoint(endpoint_id(name, record.next_endpoint_index), ep, "url")
            record = dataclasses.replace(record, endpoints=(*record.endpoints, new),
                                         next_endpoint_index=record.next_endpoint_index + 1)
            return await self._commit({name: record}, set())

    async def remove_endpoint(self, name: str, endpoint_ref: str, if_match: int | None) -> Change:
        """`endpoint_ref`: the endpoint's id ("model/ep-1") or its part after the model name ("ep-1")."""
        async with self._lock:
            await self._sync_locked()  # another worker process may have changed the store
            self._check_version(if_match)
            record = self._owned(name)
            full_id = endpoint_ref if endpoint_ref.startswith(f"{name}/") else f"{name}/{endpoint_ref}"
            kept = tuple(e for e in record.endpoints if e.id != full_id)
            if len(kept) == len(record.endpoints):
                raise NotFound(f"model '{name}' has no endpoint '{endpoint_ref}'", param="endpoint_id")
            if not kept:
                raise Conflict(f"'{full_id}' is the last endpoint of '{name}'; DELETE the model instead",
                               param="endpoint_id")
            return await self._commit({name: dataclasses.replace(record, endpoints=kept)}, set())

    async def apply_replicated(self, upserts: dict[str, ModelRecord], deletes: set[str]) -> None:
        """Changes another replica made: checked and persisted like local ones (no If-Match, no
        `on_change` echo). Config models here win over replicated ones of the same name."""
        async with self._lock:
            await self._sync_locked()
            upserts = {n: r for n, r in upserts.items()
                       if n not in self._config_names and self._records.get(n) != r}
            deletes = {n for n in deletes if n in self._records and n not in self._config_names}
            if not upserts and not deletes:
                return
            for record in upserts.values():
                for ep in record.endpoints:
                    await check_url(ep.url, self._policy, param="url")
            await self._commit(upserts, deletes, announce=False)

    # -- internals ---------------------------------------------------------------

    def _check_version(self, if_match: int | None) -> None:
        if if_match is not None and if_match != self.version:
            raise PreconditionFailed(
                f"If-Match names registry version {if_match}, but the current version is {self.version}")

    def _owned(self, name: str) -> ModelRecord:
        record = self.get(name)
        if record.source != "api":
            raise Conflict(f"model '{name}' comes from the config file; change it there", param="name")
        return record

    async def _endpoint(self, endpoint_id: str, ep: EndpointRegistration, param: str) -> EndpointRecord:
        await check_url(ep.url, self._policy, param=param)
        return EndpointRecord(id=endpoint_id, url=ep.url, weight=ep.weight, upstream_model=ep.upstream_model,
                              key_env=ep.key_env, price=ep.price.price() if ep.price is not None else None)

    async def _commit(self, upserts: dict[str, ModelRecord], deletes: set[str], announce: bool = True) -> Change:
        records = {n: r for n, r in self._records.items() if n not in deletes}
        records.update(upserts)
        try:  # a trial table: anything it would refuse is refused before persisting
            build_routing_table(records.values(), self._aliases, self._secrets, self.version + 1)
        except SitsError as exc:
            raise UnprocessableRequest(exc.message, param=exc.param) from None
        try:
            version = await asyncio.to_thread(
                self._store.commit, self.version, {n: record_to_json(r) for n, r in upserts.items()}, deletes)
        except StaleRegistryVersion:  # another process committed between our sync and this commit
            await self._reload(warn=False)
            raise Conflict("the registry changed while this change was being made (another gateway process "
                           "committed first); nothing was applied, retry it", param=None) from None
        self._apply(records, version)
        if announce and self.on_change is not None:
            self.on_change(upserts, deletes)
        changed = next(iter(upserts.values()), None)
        return Change(changed, version)

    def _apply(self, records: dict[str, ModelRecord], version: int) -> None:
        old_ids = {e.id for r in self._records.values() for e in r.endpoints}
        table = build_routing_table(records.values(), self._aliases, self._secrets, version)
        new_ids = set()
        for record in records.values():
            for ep in record.endpoints:
                new_ids.add(ep.id)
                self._health.track(ep.id, probed=record.health_check_path is not None)
        for gone in old_ids - new_ids:
            self._health.drain(gone)
        self._records = records
        self.version = version
        self._publish(table)


def _tupled(fields: dict) -> dict:  # type: ignore[type-arg]
    """Lists from JSON become tuples in the frozen record, a price its record type."""
    return {k: tuple(v) if isinstance(v, list) else Price(**v) if k == "price" and v is not None else v
            for k, v in fields.items()}
