"""The default filters' parameter models (pydantic), apart from the filters: the filters are compiled
with mypyc (docs/hot-path.md) and a compiled module holds no class that subclasses a third-party one."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sits.scheduling.params import PluginParams


class HealthyFilterParams(PluginParams):
    max_error_rate: float = 1.0  # an endpoint failing more often than this counts as unhealthy
    fail_open: bool = True  # if none is healthy, keep all: a guess beats a certain failure


class CapabilityFilterParams(PluginParams):
    undeclared_is_capable: bool = True  # an endpoint whose model declares no features is assumed able


class ContextWindowFilterParams(PluginParams):
    # completion tokens to reserve when the request gives no max_tokens
    default_completion_tokens: Annotated[int, Field(ge=0)] = 0


class SlaFilterParams(PluginParams):
    default_sla_ms: Annotated[float | None, Field(gt=0)] = None  # when neither request nor model sets one
    fail_open: bool = True  # if no endpoint meets the SLA, keep all: late beats never
