"""Profile handlers: which profile schedules a request (single, by tier, A/B split).

A handler names a primary profile; shadow profiles (set in the policy) run beside it
for comparison and never decide.
"""

from __future__ import annotations

import random
from typing import Protocol

from pydantic import Field, model_validator

from sits.scheduling.params import PluginParams
from sits.scheduling.types import SchedulingRequest


class ProfileHandler(Protocol):
    name: str

    def choose(self, request: SchedulingRequest, rng: random.Random) -> str:
        """The name of the profile that schedules `request`; one of `profiles()`."""
        ...

    def profiles(self) -> frozenset[str]:
        """Every profile name this handler may return (checked against the policy at load)."""
        ...


class SingleProfileHandlerParams(PluginParams):
    profile: str = "default"


class SingleProfileHandler:
    name = "single-profile-handler"
    Params = SingleProfileHandlerParams

    def __init__(self, params: SingleProfileHandlerParams | None = None) -> None:
        self._profile = (params or SingleProfileHandlerParams()).profile

    def choose(self, request: SchedulingRequest, rng: random.Random) -> str:
        return self._profile

    def profiles(self) -> frozenset[str]:
        return frozenset({self._profile})


class TierProfileHandlerParams(PluginParams):
    tiers: dict[str, str] = {}  # tier -> profile, e.g. {tiny: fast, heavy: careful}
    default: str = "default"


class TierProfileHandler:
    """Tiered routing: the request's tier (tiny -> base -> heavy) selects the profile."""

    name = "tier-profile-handler"
    Params = TierProfileHandlerParams

    def __init__(self, params: TierProfileHandlerParams | None = None) -> None:
        p = params or TierProfileHandlerParams()
        self._tiers = dict(p.tiers)
        self._default = p.default

    def choose(self, request: SchedulingRequest, rng: random.Random) -> str:
        if request.tier is None:
            return self._default
        return self._tiers.get(request.tier, self._default)

    def profiles(self) -> frozenset[str]:
        return frozenset({self._default, *self._tiers.values()})


class SplitProfileHandlerParams(PluginParams):
    split: dict[str, float] = Field(default_factory=lambda: {"default": 1.0})  # profile -> share

    @model_validator(mode="after")
    def _shares(self) -> SplitProfileHandlerParams:
        if not self.split or any(v < 0 for v in self.split.values()) or sum(self.split.values()) <= 0:
            raise ValueError("split needs at least one profile and non-negative shares with a positive sum")
        return self


class SplitProfileHandler:
    """A/B routing: each request goes to a profile drawn by share from the seeded RNG."""

    name = "split-profile-handler"
    Params = SplitProfileHandlerParams

    def __init__(self, params: SplitProfileHandlerParams | None = None) -> None:
        p = params or SplitProfileHandlerParams()
        self._names = list(p.split)
        self._shares = list(p.split.values())

    def choose(self, request: SchedulingRequest, rng: random.Random) -> str:
        return rng.choices(self._names, weights=self._shares, k=1)[0]

    def profiles(self) -> frozenset[str]:
        return frozenset(self._names)
