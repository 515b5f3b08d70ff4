"""The values stored in the cluster document's registers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from sits.state.crdt.hlc import Stamp


@dataclass(frozen=True, slots=True)
class AliasRoute:
    """Where an alias points. `canary_weight` is the share of new requests sent to `target`;
    the rest go to `previous`. At 1.0 every new request goes to `target` and `previous` drains."""

    target: str
    previous: str | None = None
    canary_weight: float = 1.0
    epoch: int = 1  # how many switches this alias has had, as the switching replica saw it

    @property
    def is_canary(self) -> bool:
        return self.canary_weight < 1.0 and self.previous is not None and self.previous != self.target


@dataclass(frozen=True, slots=True)
class AliasProgress:
    """One replica's progress through the switch stamped `stamp`: it routes by that route (or a later
    one), and `drained` once no request it sent to the old version is still in flight."""

    stamp: Stamp
    drained: bool


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """What one replica says about itself; only that replica writes its own entry."""

    state_hash: str
    progress: Mapping[str, AliasProgress] = field(default_factory=dict)


CircuitState = Literal["open", "closed"]


@dataclass(frozen=True, slots=True)
class CircuitNote:
    """The last circuit transition any replica saw for an endpoint: `open` tells the others to
    hold traffic back for `open_s`, `closed` that a trial request succeeded again."""

    state: CircuitState
    open_s: float = 0.0
