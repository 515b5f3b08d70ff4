"""The control API's request bodies: model registration, update and endpoint changes."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sits.control.config import Feature, PriceConfig, Tier

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]*$")]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
PositiveInt = Annotated[int, Field(ge=1)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
HealthPath = Annotated[str, Field(pattern=r"^/[^\s?#]*(\?[^\s#]*)?$", max_length=512)]
Label = Annotated[str, Field(min_length=1, max_length=64)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class EndpointRegistration(_Strict):
    url: Annotated[str, Field(min_length=1, max_length=2048)]
    weight: PositiveFloat = 1.0
    upstream_model: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    key_env: EnvName | None = None
    price: PriceConfig | None = None  # this endpoint's own price; unset: the model's


class _ModelFields(_Strict):
    description: Annotated[str, Field(max_length=1000)] | None = None
    capabilities: list[Label] | None = None  # free-form routing labels
    features: list[Feature] | None = None  # declared feature support; unset: assumed able
    latency_p95_ms: PositiveFloat | None = None
    health_check_path: HealthPath | None = None
    tier: Tier | None = None
    cost_per_1k_input: NonNegativeFloat | None = None
    cost_per_1k_output: NonNegativeFloat | None = None
    context_window: PositiveInt | None = None
    tokenizer_family: Label | None = None
    max_concurrency: PositiveInt | None = None
    upstream_model: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    key_env: EnvName | None = None
    tags: list[Label] | None = None
    version: Label | None = None
    aliases: list[Name] | None = None
    fallbacks: list[Name] | None = None
    cache: bool | None = None
    price: PriceConfig | None = None  # USD per million tokens by kind (or the cost_per_1k_* fields)

    @model_validator(mode="after")
    def _one_price_form(self) -> _ModelFields:
        if self.price is not None and (self.cost_per_1k_input is not None or self.cost_per_1k_output is not None):
            raise ValueError("price: give either 'price' (per million tokens) or 'cost_per_1k_input/output', not both")
        return self


class ModelRegistration(_ModelFields):
    """POST /v1/models/register. `endpoint` (one URL) or `endpoints` (several replicas)."""

    name: Name
    endpoint: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    endpoints: Annotated[list[EndpointRegistration], Field(min_length=1, max_length=256)] | None = None
    weight: PositiveFloat = 1.0

    @model_validator(mode="after")
    def _one_endpoint_form(self) -> ModelRegistration:
        if (self.endpoint is None) == (self.endpoints is None):
            raise ValueError("give either 'endpoint' (one URL) or 'endpoints' (a list), not both or neither")
        return self

    def endpoint_list(self) -> list[EndpointRegistration]:
        if self.endpoints is not None:
            return list(self.endpoints)
        assert self.endpoint is not None
        return [EndpointRegistration(url=self.endpoint, weight=self.weight)]


class ModelUpdate(_ModelFields):
    """PATCH /v1/models/{name}: the fields given replace the stored ones."""
