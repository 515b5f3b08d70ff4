from __future__ import annotations

import hashlib
import math
from bisect import bisect_left
from collections.abc import Sequence

from pydantic import Field

from sits.scheduling.params import PluginParams
from sits.scheduling.types import EndpointView, SchedulingRequest

_MASK = (1 << 64) - 1
# Ring points cached over all distinct endpoint sets (one per model pool, more on health flips).
_MAX_CACHED_POINTS = 1 << 21


class PrefixAffinityScorerParams(PluginParams):
    # bounded load: an endpoint takes affine traffic only while its load <= ceil(c x mean load)
    load_factor: float = Field(default=1.25, ge=1.0)
    virtual_nodes: int = Field(default=32, ge=1, le=1024)


class PrefixAffinityScorer:
    """Requests sharing a prompt prefix score 1 on the same endpoint, so its prefix cache hits.

    Consistent hashing with bounded loads (Mirrokni et al., 2018): the prefix hash picks a
    point on a ring of endpoints; walking clockwise, the first endpoint under the load bound
    wins. A hot prefix overflows to the ring's next endpoints instead of swamping one, and
    an endpoint leaving the set moves only its own prefixes.
    """

    name = "prefix-affinity-scorer"
    Params = PrefixAffinityScorerParams

    def __init__(self, params: PrefixAffinityScorerParams | None = None) -> None:
        p = params or PrefixAffinityScorerParams()
        self._c = p.load_factor
        self._vnodes = p.virtual_nodes
        # A cache of a pure function of the endpoint ids: it never changes an outcome.
        self._rings: dict[tuple[str, ...], tuple[list[int], list[int]]] = {}
        self._cached_points = 0

    def score(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        n = len(endpoints)
        scores = [0.0] * n
        key = request.prefix_hash
        if key is None or n == 0:
            return scores
        points, owners = self._ring(tuple(e.id for e in endpoints))
        loads = [e.in_flight for e in endpoints]
        bound = math.ceil(self._c * (sum(loads) + 1) / n)
        start = bisect_left(points, key & _MASK)
        size = len(points)
        for k in range(size):
            owner = owners[(start + k) % size]
            if loads[owner] + 1 <= bound:
                scores[owner] = 1.0
                break
        return scores

    def _ring(self, ids: tuple[str, ...]) -> tuple[list[int], list[int]]:
        ring = self._rings.get(ids)
        if ring is None:
            pairs = sorted(
                (int.from_bytes(hashlib.blake2b(f"{eid}#{v}".encode(), digest_size=8).digest(), "big"), i)
                for i, eid in enumerate(ids) for v in range(self._vnodes)
            )
            ring = ([p for p, _ in pairs], [i for _, i in pairs])
            while self._rings and self._cached_points + len(pairs) > _MAX_CACHED_POINTS:
                self._cached_points -= len(self._rings.pop(next(iter(self._rings)))[0])  # oldest first
            self._rings[ids] = ring
            self._cached_points += len(pairs)
        return ring


def prefix_hash(text: str, chars: int = 512) -> int | None:
    """A stable 64-bit hash of the prompt's first `chars` characters (None for an empty prompt).

    Stable across processes (unlike `hash()`), so every gateway replica maps a prefix alike.
    """
    if not text:
        return None
    return int.from_bytes(hashlib.blake2b(text[:chars].encode("utf-8", "replace"), digest_size=8).digest(), "big")
