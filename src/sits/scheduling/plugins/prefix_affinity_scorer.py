from __future__ import annotations

import hashlib
import math
from bisect import bisect_left
from collections.abc import Sequence
from operator import attrgetter

from typing import Annotated

from pydantic import Field

from sits.scheduling.params import PluginParams
from sits.scheduling.types import EndpointView, SchedulingRequest

_MASK = (1 << 64) - 1
_WRAP = 1 << 64
_ID = attrgetter("id")
# Ring points cached over all distinct endpoint sets (one per model pool, more on health flips).
_MAX_CACHED_POINTS = 1 << 21
_MAX_CACHED_IDS = 1 << 16
_MAX_SEEN_ONCE = 4096
_UNKNOWN = object()
_MAX_VNODE_RATIO = 16  # the heaviest endpoint gets at most 16x the lightest one's virtual nodes


class PrefixAffinityScorerParams(PluginParams):
    # bounded load: an endpoint takes affine traffic only while its load <= ceil(c x mean load), the
    # mean taken per unit of weight (configured capacity): with equal weights, Mirrokni's bound
    load_factor: Annotated[float, Field(ge=1.0)] = 1.25
    virtual_nodes: Annotated[int, Field(ge=1, le=1024)] = 32  # for the lightest endpoint; more in proportion to weight


class PrefixAffinityScorer:
    """Requests sharing a prompt prefix score 1 on the same endpoint, so its prefix cache hits.

    Consistent hashing with bounded loads (Mirrokni et al., 2018): the prefix hash picks a
    point on a ring of endpoints; walking clockwise, the first endpoint under the load bound
    wins. A hot prefix overflows to the ring's next endpoints instead of swamping one, and
    an endpoint leaving the set moves only its own prefixes. Both the ring share and the load
    bound follow the endpoints' weights (configured capacity); with equal weights this is the
    paper's scheme exactly. Load is this gateway's in-flight plus the engine's own queue, and an
    endpoint whose engine queues gives its prefixes up while another endpoint does not queue.

    A set of endpoints gets its ring (cached) the second time it is seen; the first time, the
    same owner is found endpoint by endpoint, so random samples of a large pool build no rings.
    """

    name = "prefix-affinity-scorer"
    Params = PrefixAffinityScorerParams

    def __init__(self, params: PrefixAffinityScorerParams | None = None) -> None:
        p = params or PrefixAffinityScorerParams()
        self._c = p.load_factor
        self._vnodes = p.virtual_nodes
        # Caches of pure functions of the endpoint ids and weights: they never change an outcome.
        self._rings: dict[tuple, tuple[list[int], list[int]]] = {}
        self._cached_points = 0
        self._points: dict[tuple[str, int], list[int]] = {}  # (endpoint, virtual nodes) -> sorted points
        self._seen_once: dict[tuple, None] = {}  # endpoint sets met once, not yet worth a ring
        self._counts: dict[tuple[float, ...], tuple[int, ...] | None] = {}  # weights -> vnode counts

    def abstains(self, request: SchedulingRequest) -> bool:
        return request.prefix_hash is None  # no prefix: every score is 0

    def score(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        n = len(endpoints)
        scores = [0.0] * n
        key = request.prefix_hash
        if key is None or n == 0:
            return scores
        key &= _MASK
        weights = tuple([e.weight if e.weight > 1e-9 else 1e-9 for e in endpoints])
        counts = self._vnode_counts(weights)
        shape = (tuple(map(_ID, endpoints)), counts)
        # requests queued inside the engine (any client's, from its /metrics) count as load too
        loads = [e.in_flight + e.queue_depth for e in endpoints]
        bounds = self._bounds(weights, counts is None, sum(loads) + 1)
        if any(e.queue_depth for e in endpoints):
            # an engine that already queues takes no affine traffic while another does not: a queued
            # request waits a whole generation, far longer than a prefix-cache miss costs
            free = [e.queue_depth == 0 for e in endpoints]
            if any(free):
                bounds = [b if f else -1 for b, f in zip(bounds, free)]
        ring = self._rings.get(shape)
        if ring is None and shape not in self._seen_once:
            # A set seen for the first time (a random sample of a large pool is seen only once):
            # the same owner as the ring walk, found endpoint by endpoint, and no ring is built.
            self._seen_once[shape] = None
            if len(self._seen_once) > _MAX_SEEN_ONCE:
                self._seen_once.clear()
            owner = self._nearest_under_bound(key, shape, loads, bounds)
            if owner >= 0:
                scores[owner] = 1.0
            return scores
        points, owners = ring if ring is not None else self._ring(shape)
        start = bisect_left(points, key)
        size = len(points)
        for k in range(size):
            owner = owners[(start + k) % size]
            if loads[owner] + 1 <= bounds[owner]:
                scores[owner] = 1.0
                break
        return scores

    def pinned(self, request: SchedulingRequest, endpoints: Sequence[EndpointView]) -> tuple[int, ...]:
        """The prefix's owner on the whole pool's ring: a sampled decision must see it (candidate_sample.py)."""
        key = request.prefix_hash
        if key is None or not endpoints:
            return ()
        weights = tuple([e.weight if e.weight > 1e-9 else 1e-9 for e in endpoints])
        points, owners = self._ring((tuple(map(_ID, endpoints)), self._vnode_counts(weights)))
        return (owners[bisect_left(points, key & _MASK) % len(points)],)

    def _vnode_counts(self, weights: tuple[float, ...]) -> tuple[int, ...] | None:
        """Virtual nodes per endpoint in proportion to its weight (None: equal weights, `virtual_nodes`
        each), so an endpoint owns a share of the prefixes in proportion to its capacity (Envoy's
        ring hash weighs hosts alike)."""
        counts = self._counts.get(weights, _UNKNOWN)
        if counts is _UNKNOWN:
            lightest = min(weights)
            if lightest == max(weights):
                counts = None
            else:
                v, most = self._vnodes, self._vnodes * _MAX_VNODE_RATIO
                counts = tuple(min(most, max(1, round(v * w / lightest))) for w in weights)
            if len(self._counts) >= _MAX_SEEN_ONCE:
                self._counts.clear()
            self._counts[weights] = counts
        return counts

    def _bounds(self, weights: tuple[float, ...], equal: bool, total_load: int) -> list[int]:
        """Each endpoint's load bound: ceil(c x total load x its share of the total weight)."""
        if equal:
            return [math.ceil(self._c * total_load / len(weights))] * len(weights)
        unit = self._c * total_load / sum(weights)
        return [math.ceil(unit * w) for w in weights]

    def _nearest_under_bound(self, key: int, shape: tuple, loads: list[int], bounds: list[int]) -> int:
        """The ring walk's answer without the ring: among endpoints under the bound, the one whose
        first point clockwise from `key` is nearest (ties to the lower index, as in the ring)."""
        ids, counts = shape
        best, best_distance = -1, _WRAP
        for i, eid in enumerate(ids):
            if loads[i] + 1 > bounds[i]:
                continue
            pts = self._points_of(eid, self._vnodes if counts is None else counts[i])
            j = bisect_left(pts, key)
            distance = pts[j] - key if j < len(pts) else pts[0] + _WRAP - key
            if distance < best_distance:
                best, best_distance = i, distance
        return best

    def _points_of(self, eid: str, count: int) -> list[int]:
        pts = self._points.get((eid, count))
        if pts is None:
            if len(self._points) >= _MAX_CACHED_IDS:
                self._points.clear()
            pts = self._points[(eid, count)] = sorted(_point(f"{eid}#{v}") for v in range(count))
        return pts

    def _ring(self, shape: tuple) -> tuple[list[int], list[int]]:
        ring = self._rings.get(shape)
        if ring is None:
            ids, counts = shape
            pairs = sorted((p, i) for i, eid in enumerate(ids)
                           for p in self._points_of(eid, self._vnodes if counts is None else counts[i]))
            ring = ([p for p, _ in pairs], [i for _, i in pairs])
            while self._rings and self._cached_points + len(pairs) > _MAX_CACHED_POINTS:
                self._cached_points -= len(self._rings.pop(next(iter(self._rings)))[0])  # oldest first
            self._rings[shape] = ring
            self._cached_points += len(pairs)
        return ring


def _point(label: str) -> int:
    return int.from_bytes(hashlib.blake2b(label.encode(), digest_size=8).digest(), "big")


def prefix_hash(text: str, chars: int = 512) -> int | None:
    """A stable 64-bit hash of the prompt's first `chars` characters (None for an empty prompt).

    Stable across processes (unlike `hash()`), so every gateway replica maps a prefix alike.
    """
    if not text:
        return None
    return int.from_bytes(hashlib.blake2b(text[:chars].encode("utf-8", "replace"), digest_size=8).digest(), "big")
