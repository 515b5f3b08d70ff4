"""The filter pass of one decision: every filter in order, or strictly over a sample.

A *predicate filter* also has `keeps(request) -> Predicate | None`: the test it applies to each
endpoint for this request, or None when it keeps every endpoint of this request (a capability
filter for a request that needs nothing). Its law, checked by the contract tests: `filter()`
returns exactly the endpoints the predicate keeps whenever that is not empty; a fail-open filter
may return more only when the predicate keeps none.

Over a whole pool the filters run one by one (`filter()`, fail-open included). Over a sample of
a larger pool they run strictly: a fail-open filter must not open over 48 sampled endpoints when
the pool has healthy ones elsewhere, so an empty strict result sends the caller back to the whole
pool. Fusing predicate filters into one pass was measured and rejected: on CPython 3.11 four
lambda calls per endpoint cost more than four inline list comprehensions (figures:
bench/README.md, "measured").
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from sits.scheduling.metrics import SchedulingMetrics
from sits.scheduling.types import EndpointView, SchedulingRequest

Predicate = Callable[[EndpointView], bool]
SAMPLE_EMPTY = ""  # what a strict pass reports when it kept nothing: retry over the whole pool


def filter_all(filters: Sequence, request: SchedulingRequest, endpoints: Sequence[EndpointView],
               rng: random.Random, timed: SchedulingMetrics | None) -> tuple[Sequence[EndpointView], str | None]:
    """(what every filter keeps, None), or ((), the name of the filter that left none).

    `timed`: the metrics to time each filter call into, on the decisions that are timed."""
    remaining = endpoints
    if timed is None:
        for f in filters:
            remaining = f.filter(request, remaining, rng)
            if not remaining:
                return (), f.name
        return remaining, None
    timer = timed.timer
    for f in filters:
        t0 = timer()
        remaining = f.filter(request, remaining, rng)
        timed.observe(f.name, timer() - t0)
        if not remaining:
            return (), f.name
    return remaining, None


def filter_strict(filters: Sequence, request: SchedulingRequest, endpoints: Sequence[EndpointView],
                  rng: random.Random, timed: SchedulingMetrics | None) -> tuple[Sequence[EndpointView], str | None]:
    """Like `filter_all` over a sample, but no filter fails open: (), SAMPLE_EMPTY if none is kept."""
    remaining = endpoints
    timer = timed.timer if timed is not None else None
    for f in filters:
        t0 = timer() if timer is not None else 0
        keeps = getattr(f, "keeps", None)
        if keeps is None:
            remaining = f.filter(request, remaining, rng)
        elif (p := keeps(request)) is not None:
            remaining = [e for e in remaining if p(e)]
        if timer is not None:
            timed.observe(f.name, timer() - t0)  # type: ignore[union-attr]
        if not remaining:
            return (), SAMPLE_EMPTY
    return remaining, None
