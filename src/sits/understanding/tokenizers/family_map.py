"""One family's half of the bridge: token id -> SUID, and its inverse, as numpy arrays.

The inverse is a sorted copy of the SUIDs with the ids beside them (binary search, no dict of
150k Python ints). Where several ids denote one unit, the lowest id wins. Maps are cached on
disk keyed by the source file's digest, so a restart loads them instead of rebuilding.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sits.understanding.tokenizers.surface import normalised_key, suid
from sits.understanding.tokenizers.vocabulary import Vocabulary

CACHE_FORMAT = 1
NO_TOKEN = np.uint64(0)


@dataclass(frozen=True, slots=True, eq=False)
class FamilyMap:
    family: str
    suids: np.ndarray  # uint64[vocab size]; 0 where the id is unused
    sorted_suids: np.ndarray  # uint64, ascending
    sorted_ids: np.ndarray  # int64, the id of each sorted SUID
    surfaces: tuple[bytes, ...]  # decoded bytes per id (b"" where unused)
    special: frozenset[int]
    end_ids: frozenset[int]

    def __len__(self) -> int:
        return len(self.suids)

    def suid_of(self, token_id: int) -> int | None:
        if not 0 <= token_id < len(self.suids):
            return None
        value = int(self.suids[token_id])
        return value or None

    def id_of(self, unit: int) -> int | None:
        """The (lowest) token id of a semantic unit in this family, or None if it has none."""
        i = int(np.searchsorted(self.sorted_suids, np.uint64(unit)))
        if i < len(self.sorted_suids) and int(self.sorted_suids[i]) == unit:
            return int(self.sorted_ids[i])
        return None

    def has_units(self, units: np.ndarray) -> np.ndarray:
        """Vectorised membership: which of `units` this family has a token for."""
        i = np.searchsorted(self.sorted_suids, units)
        i = np.minimum(i, len(self.sorted_suids) - 1)
        return self.sorted_suids[i] == units

    def text_of(self, token_id: int) -> str | None:
        """The token's text if it is a complete UTF-8 string and not a special token."""
        if token_id in self.special or not 0 <= token_id < len(self.surfaces):
            return None
        try:
            return self.surfaces[token_id].decode("utf-8") or None
        except UnicodeDecodeError:
            return None


def build_family_map(vocab: Vocabulary) -> FamilyMap:
    suids = np.zeros(len(vocab), dtype=np.uint64)
    for token_id, surface in enumerate(vocab.surfaces):
        if surface is not None:
            suids[token_id] = suid(normalised_key(surface, token_id in vocab.special))
    surfaces = tuple(s if s is not None else b"" for s in vocab.surfaces)
    return _with_inverse(vocab.family, suids, surfaces, vocab.special, vocab.end_ids)


def _with_inverse(family: str, suids: np.ndarray, surfaces: tuple[bytes, ...], special: frozenset[int],
                  end_ids: frozenset[int]) -> FamilyMap:
    present = np.flatnonzero(suids != NO_TOKEN)
    order = np.argsort(suids[present], kind="stable")  # stable: equal units keep ascending ids
    sorted_suids = suids[present][order]
    sorted_ids = present[order].astype(np.int64)
    # collapse duplicate units to their first (lowest) id
    keep = np.ones(len(sorted_suids), dtype=bool)
    keep[1:] = sorted_suids[1:] != sorted_suids[:-1]
    return FamilyMap(family, suids, sorted_suids[keep], sorted_ids[keep], surfaces, frozenset(special),
                     frozenset(end_ids))


class FamilyMapCache:
    """Maps on disk under `<data dir>/tokenizers/`, one file per (family, source digest).

    The digest is of the source file, not of the parsed vocabulary, so a hit skips parsing too.
    """

    def __init__(self, directory: Path) -> None:
        self._dir = Path(directory)

    def path(self, family: str, digest: str) -> Path:
        return self._dir / f"{family}-{digest[:16]}-v{CACHE_FORMAT}.npz"

    def load_or_build(self, family: str, digest: str, load_vocabulary: Callable[[], Vocabulary]
                      ) -> tuple[FamilyMap, bool]:
        """The family's map and whether it came from the cache; `load_vocabulary` runs only on a miss."""
        cached = self.load(family, digest)
        if cached is not None:
            return cached, True
        built = build_family_map(load_vocabulary())
        self.store(family, digest, built)
        return built, False

    def load(self, family: str, digest: str) -> FamilyMap | None:
        try:
            with np.load(self.path(family, digest)) as data:
                suids = data["suids"]
                blob = data["surface_bytes"].tobytes()
                offsets = data["surface_offsets"]
                special = frozenset(int(i) for i in data["special"])
                end_ids = frozenset(int(i) for i in data["end_ids"])
        except (OSError, KeyError, ValueError, EOFError):
            return None  # absent or unreadable: rebuild
        if len(offsets) != len(suids) + 1:
            return None
        bounds = offsets.tolist()
        surfaces = tuple(blob[a:b] for a, b in zip(bounds, bounds[1:]))
        return _with_inverse(family, suids, surfaces, special, end_ids)

    def store(self, family: str, digest: str, family_map: FamilyMap) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        offsets = np.zeros(len(family_map.surfaces) + 1, dtype=np.int64)
        np.cumsum([len(s) for s in family_map.surfaces], out=offsets[1:])
        fd, tmp = tempfile.mkstemp(dir=self._dir, suffix=".npz.part")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, suids=family_map.suids,
                         surface_bytes=np.frombuffer(b"".join(family_map.surfaces), dtype=np.uint8),
                         surface_offsets=offsets,
                         special=np.array(sorted(family_map.special), dtype=np.int64),
                         end_ids=np.array(sorted(family_map.end_ids), dtype=np.int64))
            os.replace(tmp, self.path(family, digest))  # atomic: a concurrent reader sees a whole file or none
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
