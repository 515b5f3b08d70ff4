"""Priority classes: P0 (real-time), P1 (interactive), P2 (batch), how a request gets one (the
`x-sits-priority` header, its API key, its model, the default) and how config and headers spell them.
The gate that admits by class is `admission.py`."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType
from typing import Final

from sits.errors import UnprocessableRequest
from sits.state.admission_config import AdmissionConfig

PRIORITY_HEADER = "x-sits-priority"


class Priority(IntEnum):
    """Lower value, more urgent."""

    P0 = 0  # real-time
    P1 = 1  # interactive
    P2 = 2  # batch


CLASSES: Final = tuple(Priority)
_SPELLINGS = {
    "p0": Priority.P0, "0": Priority.P0, "realtime": Priority.P0, "real-time": Priority.P0,
    "p1": Priority.P1, "1": Priority.P1, "interactive": Priority.P1,
    "p2": Priority.P2, "2": Priority.P2, "batch": Priority.P2,
}


def priority_from(value: str | int | Priority) -> Priority | None:
    """P0/P1/P2, 0/1/2 or realtime/interactive/batch (any case); None when it is none of them."""
    if isinstance(value, Priority):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Priority(value) if 0 <= value <= 2 else None
    if isinstance(value, str):
        return _SPELLINGS.get(value.strip().lower())
    return None


def parse_priority_header(value: str) -> Priority:
    """The `x-sits-priority` header's class; 422 naming the header when it is not one."""
    priority = priority_from(value)
    if priority is None:
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise UnprocessableRequest(
            f"invalid {PRIORITY_HEADER} header {shown!r}: use P0, P1 or P2 (also 0/1/2 or realtime/interactive/batch)",
            param=PRIORITY_HEADER,
        )
    return priority


def key_digest(api_key: str) -> str:
    """How config names an API key: its SHA-256 in hex, so no secret sits in YAML."""
    return hashlib.sha256(api_key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class PriorityRules:
    """Which class a request gets: header, else its API key's class, else its model's, else default.

    With `key_is_ceiling` a key's class is also the most urgent the header may ask for, so a batch
    key cannot promote itself to P0; asking for a higher class quietly gets the key's class.
    """

    default: Priority = Priority.P1
    by_model: Mapping[str, Priority] = field(default_factory=lambda: MappingProxyType({}))
    by_key_sha256: Mapping[str, Priority] = field(default_factory=lambda: MappingProxyType({}))
    key_is_ceiling: bool = True

    def resolve(self, header: str | None, api_key: str | None, model: str, key_class: int | None = None) -> Priority:
        """The request's admission class; `key_class`: the tenant key's, when it names one."""
        by_key = CLASSES[key_class] if key_class is not None else (
            self.by_key_sha256.get(key_digest(api_key)) if api_key and self.by_key_sha256 else None)
        if header is not None:
            asked = parse_priority_header(header)
            if by_key is not None and self.key_is_ceiling:
                return max(asked, by_key)
            return asked
        if by_key is not None:
            return by_key
        return self.by_model.get(model, self.default)


def priority_rules(config: AdmissionConfig) -> PriorityRules:
    return PriorityRules(
        default=Priority[config.default_priority],
        by_model=MappingProxyType({m: Priority[p] for m, p in config.priority_by_model.items()}),
        by_key_sha256=MappingProxyType({k: Priority[p] for k, p in config.priority_by_key_sha256.items()}),
        key_is_ceiling=config.key_is_ceiling,
    )
