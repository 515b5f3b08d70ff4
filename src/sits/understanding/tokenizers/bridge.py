"""The cross-vocabulary bridge: token ids of one family to token ids of another through SUIDs.

A token has an *exact counterpart* in another family when that family has a token with the
same normalised surface form (same bytes as NFC text, or the same special token). Everything
here is a pure function of the family maps: no I/O, safe on the request path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from sits.understanding.tokenizers.family_map import NO_TOKEN, FamilyMap


@dataclass(frozen=True, slots=True)
class Coverage:
    source: str
    target: str
    tokens: int  # the source family's tokens (ids in use)
    exact: int  # of those, how many have an exact counterpart in the target

    @property
    def share(self) -> float:
        return self.exact / self.tokens if self.tokens else 0.0


class TokenBridge:
    """Family maps by family name; translations between any two of them."""

    def __init__(self, maps: Iterable[FamilyMap] = ()) -> None:
        self._maps: dict[str, FamilyMap] = {m.family: m for m in maps}
        self.maps: Mapping[str, FamilyMap] = MappingProxyType(self._maps)  # live, read-only

    def add(self, family_map: FamilyMap) -> None:
        self._maps[family_map.family] = family_map

    def families(self) -> list[str]:
        return sorted(self._maps)

    def family(self, name: str) -> FamilyMap | None:
        return self._maps.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._maps

    def __len__(self) -> int:
        return len(self._maps)

    def translate_id(self, source: str, target: str, token_id: int) -> int | None:
        """The target family's token for the same unit, or None if it has no exact counterpart."""
        src, dst = self._maps[source], self._maps[target]
        if source == target:
            return token_id if src.suid_of(token_id) is not None else None
        unit = src.suid_of(token_id)
        return None if unit is None else dst.id_of(unit)

    def translate_ids(self, source: str, target: str, ids: Iterable[int]) -> Mapping[int, int | None]:
        return {i: self.translate_id(source, target, i) for i in ids}

    def coverage(self, source: str, target: str) -> Coverage:
        src, dst = self._maps[source], self._maps[target]
        units = src.suids[src.suids != NO_TOKEN]
        exact = int(np.count_nonzero(dst.has_units(units))) if len(units) and len(dst.sorted_suids) else 0
        return Coverage(source, target, int(len(units)), exact)

    def coverage_table(self) -> list[Coverage]:
        names = self.families()
        return [self.coverage(a, b) for a in names for b in names if a != b]
