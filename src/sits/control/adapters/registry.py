"""LoRA / QLoRA / IA3 adapters by PEFT directory: registered, checked against their base model,
activated on the base model's vLLM endpoints, and routed as `model: "base:adapter"`.

Registration validates at once and keeps the report; activation refuses an adapter with any
violation. The data plane reads two things, without awaiting: the variant entry of a
`base:adapter` name and the endpoints that hold an adapter.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from sits.backends.vllm_admin import VllmAdmin
from sits.control.adapters.base_model import BaseModelSpec, load_base_spec
from sits.control.adapters.contract import EngineLimits, Violation, check_contract
from sits.control.adapters.peft_files import AdapterFileError, read_adapter
from sits.control.adapters.schemas import AdapterRegistration, BaseModelDeclaration
from sits.control.adapters.store import AdapterStore
from sits.errors import (
    Conflict,
    InvalidRequest,
    ModelNotFound,
    NotFound,
    SitsError,
    UnprocessableRequest,
    UpstreamError,
)
from sits.state.routing_table import Endpoint, ModelEntry, RoutingTable

SEPARATOR = ":"
log = logging.getLogger("sits.adapters")
_MAX_CACHED_VARIANTS = 512


@dataclass(frozen=True, slots=True)
class AdapterRecord:
    name: str
    path: str
    engine_path: str
    base_model: str
    kind: str
    dtype: str | None
    rank: int | None
    target_modules: tuple[str, ...]
    violations: tuple[Violation, ...]
    loaded_on: frozenset[str] = frozenset()

    @property
    def valid(self) -> bool:
        return not self.violations

    @property
    def variant(self) -> str:
        """The model name clients ask for: `base:adapter`."""
        return f"{self.base_model}{SEPARATOR}{self.name}"

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "model": self.variant, "base_model": self.base_model, "kind": self.kind,
                "path": self.path, "engine_path": self.engine_path, "dtype": self.dtype, "rank": self.rank,
                "target_modules": list(self.target_modules), "valid": self.valid,
                "violations": [v.as_dict() for v in self.violations], "loaded_on": sorted(self.loaded_on)}


@dataclass(frozen=True, slots=True)
class _Base:
    declaration: BaseModelDeclaration
    spec: BaseModelSpec


class AdapterRegistry:
    def __init__(self, table: Callable[[], RoutingTable], admin: VllmAdmin, store: AdapterStore | None = None) -> None:
        self._table = table
        self._admin = admin
        self._store = store
        self._records: dict[str, AdapterRecord] = {}
        self.registered: Mapping[str, AdapterRecord] = MappingProxyType(self._records)  # live, read-only
        self._bases: dict[str, _Base] = {}
        self._registrations: dict[str, AdapterRegistration] = {}
        self._lock = asyncio.Lock()
        self._variants: dict[tuple[int, str], ModelEntry | None] = {}  # a cache of resolve()
        self._seen_version: int | None = None  # the store's version this registry has caught up with

    # -- control plane ---------------------------------------------------------

    async def register(self, reg: AdapterRegistration) -> AdapterRecord:
        async with self._lock:
            record = await self._register_locked(reg)
            await self._save(upsert=self._registrations[reg.name])
            return record

    async def restore(self) -> list[AdapterRecord]:
        """At startup: the saved registrations, checked again, then where the engines have them loaded."""
        if self._store is None:
            return []
        async with self._lock:
            saved = await asyncio.to_thread(self._store.load_versioned)
            restored = await self._register_saved(saved.registrations)
            self._seen_version = saved.version
            await self._rediscover_locked()
            return [self._records[r.name] for r in restored]

    async def sync(self) -> bool:
        """Catch up with what another process sharing the store changed (`sits serve --workers N`):
        registrations and removals made through another worker, and, after its activations, where the
        engines now hold each adapter. True if there was anything to catch up with."""
        if self._store is None:
            return False
        async with self._lock:
            if await asyncio.to_thread(self._store.version) == self._seen_version:
                return False
            saved = await asyncio.to_thread(self._store.load_versioned)
            if not saved.readable:
                return False  # keep what this worker knows rather than drop it all; logged by the store
            await self._register_saved([r for r in saved.registrations if self._registrations.get(r.name) != r])
            kept = {r.name for r in saved.registrations}
            for name in [n for n in self._records if n not in kept]:  # removed through another worker
                del self._records[name]
                self._registrations.pop(name, None)
            self._variants.clear()
            self._seen_version = saved.version
            await self._rediscover_locked()
            return True

    async def rediscover(self) -> None:
        """Ask every base endpoint which adapters it serves (`/v1/models`) and record where each is loaded."""
        async with self._lock:
            await self._rediscover_locked()

    async def _rediscover_locked(self) -> None:
        served: dict[str, frozenset[str]] = {}
        for record in list(self._records.values()):
            entry = self._table().models.get(record.base_model)
            loaded = set()
            for endpoint in entry.endpoints if entry is not None else ():
                if endpoint.id not in served:
                    try:
                        served[endpoint.id] = await self._admin.served_models(endpoint)
                    except SitsError as exc:
                        log.info("adapters on %s unknown: %s", endpoint.id, exc.message)
                        served[endpoint.id] = frozenset()
                if record.name in served[endpoint.id]:
                    loaded.add(endpoint.id)
            self._set(dataclasses.replace(record, loaded_on=frozenset(loaded)))

    async def _register_locked(self, reg: AdapterRegistration, from_store: bool = False) -> AdapterRecord:
        """`from_store`: a registration another worker accepted; where it is loaded is asked afterwards."""
        table = self._table()
        if reg.base_model not in table.models:
            raise ModelNotFound(f"base model {reg.base_model!r} is not served here", param="base_model")
        current = self._records.get(reg.name)
        if current is not None and current.loaded_on and not from_store:
            raise Conflict(f"adapter {reg.name!r} is active on {', '.join(sorted(current.loaded_on))}; "
                           "deactivate it before registering it again", param="name")
        base = await self._base(reg)
        record = await asyncio.to_thread(_checked, reg, base)
        self._registrations[reg.name] = reg.model_copy(update={"base": base.declaration})  # self-contained
        self._set(record)
        return record

    async def _register_saved(self, registrations: list[AdapterRegistration]) -> list[AdapterRecord]:
        """Registrations read from the store, checked here; one that cannot be is logged and skipped."""
        done = []
        for reg in registrations:
            try:
                done.append(await self._register_locked(reg, from_store=True))
            except (SitsError, OSError) as exc:
                log.warning("adapter %s not restored: %s", reg.name, getattr(exc, "message", exc))
        return done

    async def validate(self, name: str) -> AdapterRecord:
        """Check the files again (they may have changed on disk); keeps where it is loaded."""
        async with self._lock:
            reg = self._registration(name)
            record = await asyncio.to_thread(_checked, reg, self._bases[reg.base_model])
            record = dataclasses.replace(record, loaded_on=self._records[name].loaded_on)
            self._set(record)
            return record

    async def activate(self, name: str, endpoint_ids: list[str] | None = None) -> tuple[AdapterRecord, dict[str, str]]:
        """Load the adapter on the base model's endpoints; returns the record and each endpoint's outcome."""
        async with self._lock:
            record = self.get(name)
            if not record.valid:
                first = record.violations[0]
                raise UnprocessableRequest(
                    f"adapter {name!r} violates its base model's contract: "
                    + "; ".join(f"{v.field}: {v.message}" for v in record.violations), param=first.field)
            outcomes: dict[str, str] = {}
            loaded = set(record.loaded_on)
            first_error: UpstreamError | None = None
            for endpoint in self._endpoints(record, endpoint_ids):
                try:
                    await self._admin.load_lora_adapter(endpoint, record.name, record.engine_path)
                    outcomes[endpoint.id] = "loaded"
                    loaded.add(endpoint.id)
                except Conflict:
                    outcomes[endpoint.id] = "already loaded"
                    loaded.add(endpoint.id)
                except UpstreamError as exc:
                    outcomes[endpoint.id] = exc.message
                    first_error = first_error or exc
            record = dataclasses.replace(record, loaded_on=frozenset(loaded))
            self._set(record)
            await self._save()  # the other workers ask the engines where it is loaded now
            if not loaded and first_error is not None:
                # our own 502 with every endpoint's answer (a relayed engine 404 would read as "no such route");
                # every outcome here is a failure, whose message names its endpoint already
                raise UpstreamError(f"adapter {name!r} was loaded nowhere: " + "; ".join(outcomes.values()))
            return record, outcomes

    async def deactivate(self, name: str, endpoint_ids: list[str] | None = None
                         ) -> tuple[AdapterRecord, dict[str, str]]:
        async with self._lock:
            record = self.get(name)
            outcomes: dict[str, str] = {}
            loaded = set(record.loaded_on)
            wanted = set(endpoint_ids) if endpoint_ids is not None else set(loaded)
            by_id = {e.id: e for e in self._base_entry(record).endpoints}
            missing = sorted(wanted - by_id.keys() - loaded)  # checked before any call: nothing half-applied
            if missing:
                raise NotFound(f"model {record.base_model!r} has no endpoint {', '.join(missing)}", param="endpoints")
            for endpoint_id in sorted(wanted):
                endpoint = by_id.get(endpoint_id)
                if endpoint is None:  # the endpoint left the table while the adapter was loaded there
                    outcomes[endpoint_id] = "endpoint removed"
                    loaded.discard(endpoint_id)
                    continue
                try:
                    await self._admin.unload_lora_adapter(endpoint, record.name)
                    outcomes[endpoint_id] = "unloaded"
                except NotFound:
                    outcomes[endpoint_id] = "was not loaded"
                except UpstreamError as exc:
                    outcomes[endpoint_id] = exc.message
                    continue  # still loaded there, as far as we know
                loaded.discard(endpoint_id)
            record = dataclasses.replace(record, loaded_on=frozenset(loaded))
            self._set(record)
            await self._save()
            return record, outcomes

    async def remove(self, name: str) -> None:
        async with self._lock:
            record = self.get(name)
            if record.loaded_on:
                raise Conflict(f"adapter {name!r} is active on {', '.join(sorted(record.loaded_on))}; "
                               "deactivate it first", param="name")
            del self._records[name]
            del self._registrations[name]
            self._variants.clear()
            await self._save(remove=name)

    def get(self, name: str) -> AdapterRecord:
        record = self._records.get(name)
        if record is None:
            raise NotFound(f"no adapter named {name!r}", param="name")
        return record

    def records(self) -> list[AdapterRecord]:
        return [self._records[n] for n in sorted(self._records)]

    # -- data plane: no awaits -----------------------------------------------

    def resolve(self, table: RoutingTable, requested: str) -> ModelEntry | None:
        """The entry serving `base:adapter`: the base's name and endpoints, upstream model = the adapter's
        name, endpoints holding it first. None unless a valid adapter of that base is registered."""
        key = (table.version, requested)
        if key in self._variants:
            return self._variants[key]
        entry = self._variant(table, requested)
        if len(self._variants) >= _MAX_CACHED_VARIANTS:
            self._variants.clear()
        self._variants[key] = entry
        return entry

    def loaded_on(self, model: ModelEntry) -> frozenset[str]:
        """Endpoints holding the adapter a variant entry (from `resolve`) serves; empty for other entries."""
        if not model.endpoints:
            return frozenset()
        record = self._records.get(model.endpoints[0].upstream_model)
        if record is None or record.base_model != model.name or not record.valid:
            return frozenset()
        return record.loaded_on

    # -- internals -------------------------------------------------------------

    def _variant(self, table: RoutingTable, requested: str) -> ModelEntry | None:
        base_name, sep, name = requested.rpartition(SEPARATOR)
        record = self._records.get(name) if sep else None
        if record is None or not record.valid:
            return None
        base = table.resolve(base_name)
        if base is None or base.name != record.base_model:
            return None
        endpoints = sorted(base.endpoints, key=lambda e: e.id not in record.loaded_on)  # holders first
        # The entry keeps the base's name: the same engines, so the same admission gate and stats.
        return dataclasses.replace(
            base, fallbacks=(), cache=False,
            endpoints=tuple(dataclasses.replace(e, upstream_model=record.name) for e in endpoints),
        )

    async def _save(self, upsert: AdapterRegistration | None = None, remove: str | None = None) -> None:
        """One change to the shared store. This registry stays caught up only if nobody else changed
        the store since it last looked; otherwise the next `sync` reads the other change too."""
        if self._store is not None:
            before, after = await asyncio.to_thread(self._store.update, upsert, remove)
            if before == self._seen_version:
                self._seen_version = after

    def _set(self, record: AdapterRecord) -> None:
        self._records[record.name] = record
        self._variants.clear()  # a change of validity or placement changes the variant entries

    def _registration(self, name: str) -> AdapterRegistration:
        self.get(name)
        return self._registrations[name]

    def _base_entry(self, record: AdapterRecord) -> ModelEntry:
        entry = self._table().models.get(record.base_model)
        if entry is None:
            raise ModelNotFound(f"base model {record.base_model!r} is no longer served", param="base_model")
        return entry

    def _endpoints(self, record: AdapterRecord, endpoint_ids: list[str] | None) -> list[Endpoint]:
        endpoints = list(self._base_entry(record).endpoints)
        if endpoint_ids is None:
            return endpoints
        by_id = {e.id: e for e in endpoints}
        missing = [i for i in endpoint_ids if i not in by_id]
        if missing:
            raise NotFound(f"model {record.base_model!r} has no endpoint {', '.join(missing)}", param="endpoints")
        return [by_id[i] for i in endpoint_ids]

    async def _base(self, reg: AdapterRegistration) -> _Base:
        if reg.base is None:
            known = self._bases.get(reg.base_model)
            if known is None:
                raise InvalidRequest(f"the first adapter of {reg.base_model!r} must declare 'base' (model_id, "
                                     "config, max_lora_rank)", param="base")
            return known
        known = self._bases.get(reg.base_model)
        if known is not None and known.declaration == reg.base:
            return known
        spec = await asyncio.to_thread(load_base_spec, reg.base.model_id, Path(reg.base.config))
        base = _Base(reg.base, spec)
        self._bases[reg.base_model] = base
        return base


def _checked(reg: AdapterRegistration, base: _Base) -> AdapterRecord:
    """Read the PEFT directory and check it; blocking (file reads), run in a thread."""
    engine_path = reg.engine_path or reg.path
    try:
        files = read_adapter(Path(reg.path))
    except AdapterFileError as exc:
        return AdapterRecord(reg.name, reg.path, engine_path, reg.base_model, reg.kind, reg.dtype, None, (),
                             (Violation(exc.field, exc.message),))
    violations = check_contract(
        files, base.spec, EngineLimits(base.declaration.max_lora_rank), reg.dtype,
        Path(base.declaration.tokenizer) if base.declaration.tokenizer else None)
    if reg.kind == "ia3" and files.peft_type != "IA3" or reg.kind != "ia3" and files.peft_type == "IA3":
        violations.append(Violation("kind", f"registered as {reg.kind} but adapter_config.json says "
                                            f"{files.peft_type}"))
    targets = tuple(sorted(files.target_modules(frozenset(base.spec.module_shapes()))))
    return AdapterRecord(reg.name, reg.path, engine_path, reg.base_model, reg.kind, reg.dtype, files.rank, targets,
                         tuple(violations))
