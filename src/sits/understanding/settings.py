"""Config schema of request understanding (the `understanding:` section of the gateway YAML).

Pydantic at the edge; `to_*` methods turn it into the frozen values the code uses.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from sits.understanding.intent_routes import IntentRoute, IntentRoutes
from sits.understanding.tier_selection import DEFAULT_HEAVY_FROM, DEFAULT_TINY_BELOW, TierParams

Unit = Annotated[float, Field(ge=0.0, le=1.0)]
EmbedderName = Literal["minilm", "e5", "charngram", "minilm+charngram", "e5+charngram", "minilm+e5", "minilm+e5+charngram",
                       "cascade"]
StageEmbedder = Literal["minilm", "e5", "charngram"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TierSelectionConfig(_Strict):
    """score = load_weight * (1 - excess) + complexity_weight * complexity; < tiny_below: tiny,
    < heavy_from: base, else heavy. `excess`: the needed tier's in-flight fraction past `saturated_at`
    (understanding/tier_selection.py)."""

    load_weight: Unit = 0.4
    complexity_weight: Unit = 0.6
    tiny_below: Unit = DEFAULT_TINY_BELOW
    heavy_from: Unit = DEFAULT_HEAVY_FROM
    saturated_at: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.8

    @model_validator(mode="after")
    def _check(self) -> TierSelectionConfig:
        if abs(self.load_weight + self.complexity_weight - 1.0) > 1e-9:
            raise ValueError("load_weight + complexity_weight must be 1")
        if self.tiny_below > self.heavy_from:
            raise ValueError("tiny_below must not exceed heavy_from")
        return self

    def to_params(self) -> TierParams:
        return TierParams(self.load_weight, self.complexity_weight, self.tiny_below, self.heavy_from,
                          self.saturated_at)


class IntentRouteConfig(_Strict):
    """Send requests of one intent to a model or a workflow, when the classifier is sure enough."""

    intent: Annotated[str, Field(min_length=1)]
    model: str | None = None
    workflow: str | None = None
    min_confidence: Unit = 0.5

    @model_validator(mode="after")
    def _one_target(self) -> IntentRouteConfig:
        if (self.model is None) == (self.workflow is None):
            raise ValueError("give exactly one of 'model' or 'workflow'")
        return self


class QualityRouterConfig(_Strict):
    path: str = Field(description="a router directory written by `sits router train`")
    cost_weight: Annotated[float, Field(ge=0.0)] = 0.0  # lambda in quality - lambda * cost
    quality_target: Unit | None = None  # if set: the cheapest model predicted to reach it


CASCADE_MIN_MARGIN = 0.35  # `sits intent tune` on the training rows (docs/understanding.md, "The cascade")


class CascadeConfig(_Strict):
    """`embedder: cascade`: the fast head decides unless its margin is below `min_margin`."""

    fast: StageEmbedder = "charngram"
    accurate: StageEmbedder = "e5"
    # Escalate when the fast head's top probability minus the runner-up's is below this.
    # Chosen by cross-validation on training data only (docs/understanding.md).
    min_margin: Unit = CASCADE_MIN_MARGIN
    # Accurate-stage vectors of this many recent prompts are kept, so repeats skip the slow model.
    cache_entries: Annotated[int, Field(ge=0, le=1_000_000)] = 1024

    @model_validator(mode="after")
    def _two_models(self) -> CascadeConfig:
        if self.fast == self.accurate:
            raise ValueError("'fast' and 'accurate' must be different embedders")
        return self


class UnderstandingConfig(_Strict):
    enabled: bool = True
    domains_file: str | None = None  # None: the packaged default domains
    # The cascade (char n-grams, e5 only when unsure) keeps e5's accuracy within 1-2 points at
    # 2-3 ms p50 on short prompts; e5 alone is the most accurate, at 20-50 ms on this CPU
    # (docs/understanding.md, bench/bench_understanding.py).
    embedder: EmbedderName = "cascade"
    classify_timeout_ms: Annotated[float, Field(gt=0)] = 50.0
    micro_batch: Annotated[int, Field(ge=1, le=256)] = 32
    batch_wait_ms: Annotated[float, Field(ge=0)] = 1.0
    cascade: CascadeConfig = CascadeConfig()  # used when embedder is "cascade"
    tier: TierSelectionConfig = TierSelectionConfig()
    routes: list[IntentRouteConfig] = []
    quality_router: QualityRouterConfig | None = None

    @field_validator("cascade")
    @classmethod
    def _cascade_needs_its_embedder(cls, value: CascadeConfig, info: ValidationInfo) -> CascadeConfig:
        # Only runs when `cascade:` is given: settings that would be silently ignored are an error.
        embedder = info.data.get("embedder")
        if embedder is not None and embedder != "cascade":
            raise ValueError(f"'cascade' is set but 'embedder' is {embedder!r}; use 'embedder: cascade'")
        return value

    def to_routes(self) -> IntentRoutes:
        return IntentRoutes(tuple(IntentRoute(r.intent, r.model, r.workflow, r.min_confidence) for r in self.routes))
