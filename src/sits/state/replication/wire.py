"""The cluster document on the wire (Redis messages, HTTP bodies, the snapshot file): JSON,
validated strictly on the way in, since it crosses a process boundary."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sits.state.crdt.gcounter import GCounter
from sits.state.crdt.hlc import Stamp
from sits.state.crdt.lww_map import LWWMap
from sits.state.crdt.lww_register import LWWRegister
from sits.state.replication.document import ClusterDoc
from sits.state.replication.records import AliasProgress, AliasRoute, CircuitNote, ReplicaStatus

WIRE_VERSION = 1
MAX_MESSAGE_BYTES = 8 * 1024 * 1024

Id = Annotated[str, Field(min_length=1, max_length=256)]
WireStamp = tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)], Annotated[str, Field(max_length=256)]]


class WireError(ValueError):
    """A message that is not a valid cluster document; it is dropped, never half-applied."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Route(_Wire):
    target: Id
    previous: Id | None = None
    canary_weight: Annotated[float, Field(gt=0, le=1)] = 1.0
    epoch: Annotated[int, Field(ge=1)] = 1


class _Progress(_Wire):
    s: WireStamp
    drained: bool


class _Status(_Wire):
    state_hash: Annotated[str, Field(max_length=64)]
    progress: dict[Id, _Progress] = {}


class _Circuit(_Wire):
    state: Literal["open", "closed"]
    open_s: Annotated[float, Field(ge=0)] = 0.0


class _RouteEntry(_Wire):
    s: WireStamp
    v: _Route | None


class _StatusEntry(_Wire):
    s: WireStamp
    v: _Status | None


class _CircuitEntry(_Wire):
    s: WireStamp
    v: _Circuit | None


class _RegistryEntry(_Wire):
    s: WireStamp
    v: Annotated[str, Field(max_length=1_000_000)] | None


class _KeyVersionEntry(_Wire):
    s: WireStamp
    v: Annotated[int, Field(ge=0)] | None


class _Message(_Wire):
    version: Literal[1]
    origin: Id
    aliases: dict[Id, _RouteEntry] = {}
    replicas: dict[Id, _StatusEntry] = {}
    served: dict[Id, Annotated[int, Field(ge=0)]] = {}
    circuits: dict[Id, _CircuitEntry] = {}
    registry: dict[Id, _RegistryEntry] = {}
    key_versions: dict[Id, _KeyVersionEntry] = {}


def encode(doc: ClusterDoc, origin: str) -> bytes:
    message: dict[str, Any] = {
        "version": WIRE_VERSION,
        "origin": origin,
        "aliases": {k: {"s": r.stamp.to_wire(), "v": _route_out(r.value)} for k, r in doc.aliases.entries.items()},
        "replicas": {k: {"s": r.stamp.to_wire(), "v": _status_out(r.value)} for k, r in doc.replicas.entries.items()},
        "served": dict(doc.served.counts),
        "circuits": {k: {"s": r.stamp.to_wire(), "v": None if r.value is None else
                         {"state": r.value.state, "open_s": r.value.open_s}} for k, r in doc.circuits.entries.items()},
        "registry": {k: {"s": r.stamp.to_wire(), "v": r.value} for k, r in doc.registry.entries.items()},
    }
    if doc.key_versions.entries:  # only when tenants announce changes: replicas without the field still read the rest
        message["key_versions"] = {k: {"s": r.stamp.to_wire(), "v": r.value} for k, r in doc.key_versions.entries.items()}
    return orjson.dumps(message)


def decode(data: bytes | str) -> tuple[str, ClusterDoc]:
    """(origin replica, document); WireError for anything malformed."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise WireError(f"cluster message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        m = _Message.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise WireError(f"invalid cluster message: {where}: {first['msg']}") from None
    doc = ClusterDoc(
        aliases=LWWMap({k: LWWRegister(_route_in(e.v), _stamp(e.s)) for k, e in m.aliases.items()}),
        replicas=LWWMap({k: LWWRegister(_status_in(e.v), _stamp(e.s)) for k, e in m.replicas.items()}),
        served=GCounter(dict(m.served)),
        circuits=LWWMap({k: LWWRegister(None if e.v is None else CircuitNote(e.v.state, e.v.open_s), _stamp(e.s))
                         for k, e in m.circuits.items()}),
        registry=LWWMap({k: LWWRegister(e.v, _stamp(e.s)) for k, e in m.registry.items()}),
        key_versions=LWWMap({k: LWWRegister(e.v, _stamp(e.s)) for k, e in m.key_versions.items()}),
    )
    return m.origin, doc


def _stamp(raw: WireStamp) -> Stamp:
    return Stamp(raw[0], raw[1], raw[2])


def _route_out(route: AliasRoute | None) -> dict[str, Any] | None:
    if route is None:
        return None
    return {"target": route.target, "previous": route.previous, "canary_weight": route.canary_weight,
            "epoch": route.epoch}


def _route_in(route: _Route | None) -> AliasRoute | None:
    if route is None:
        return None
    return AliasRoute(route.target, route.previous, route.canary_weight, route.epoch)


def _status_out(status: ReplicaStatus | None) -> dict[str, Any] | None:
    if status is None:
        return None
    return {"state_hash": status.state_hash,
            "progress": {a: {"s": p.stamp.to_wire(), "drained": p.drained} for a, p in status.progress.items()}}


def _status_in(status: _Status | None) -> ReplicaStatus | None:
    if status is None:
        return None
    return ReplicaStatus(status.state_hash,
                         {a: AliasProgress(_stamp(p.s), p.drained) for a, p in status.progress.items()})
