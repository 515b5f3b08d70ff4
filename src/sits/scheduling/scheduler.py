"""The scheduler: a profile handler over named profiles, plus shadow profiles and metrics."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sits.scheduling.framework import DEFAULT_PICK_LIMIT, Decision, Profile
from sits.scheduling.metrics import NO_SCHEDULING_METRICS, SchedulingMetrics
from sits.scheduling.profile_handlers import ProfileHandler
from sits.scheduling.types import EndpointView, SchedulingRequest


@dataclass(frozen=True, slots=True)
class Scheduler:
    handler: ProfileHandler
    profiles: Mapping[str, Profile]
    shadows: tuple[str, ...] = ()
    metrics: SchedulingMetrics = NO_SCHEDULING_METRICS
    # Shadows draw from their own RNG so that adding one never changes the primary's picks.
    shadow_rng: random.Random = field(default_factory=lambda: random.Random(0))
    # A handler that can name one profile only is not asked per request (it could only answer that one).
    _only: str | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = self.handler.profiles()
        object.__setattr__(self, "_only", next(iter(names)) if len(names) == 1 else None)

    def lone(self, endpoint: EndpointView) -> Decision | None:
        """The decision for a pool of just `endpoint`, made once for every request (the table's models
        with one endpoint): None when a request could change it (a filter that may turn it away, a handler
        that picks among profiles, shadow profiles to record). A caller that uses it counts each request
        with `metrics.decision(decision.profile)`, as a scheduled one is counted."""
        if self._only is None or self.shadows:
            return None
        return self.profiles[self._only].lone(endpoint)

    def schedule(
        self,
        request: SchedulingRequest,
        endpoints: Sequence[EndpointView],
        rng: random.Random,
        limit: int = DEFAULT_PICK_LIMIT,
    ) -> Decision:
        """Pure given (request, endpoints, rng state) and the stateful pickers' own cursors.

        Any number of endpoints, one included: the profile's hard filters (context window,
        capability, tier, ...) decide whether even an only endpoint may serve the request, and
        a filtered set of one skips scoring (reason "only endpoint")."""
        primary = self._only or self.handler.choose(request, rng)
        decision = self.profiles[primary].run(request, endpoints, rng, self.metrics, limit)
        if not self.shadows:
            return decision
        shadows = tuple(self.profiles[s].run(request, endpoints, self.shadow_rng, NO_SCHEDULING_METRICS, limit)
                        for s in self.shadows if s != primary)
        return decision._replace(shadows=shadows)
