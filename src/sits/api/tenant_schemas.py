"""Bodies of the tenant admin API (api/tenant_routes.py): strict, unknown fields refused, every error
naming its field (through `parse_body`)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from sits.errors import UnprocessableRequest
from sits.state.admission_config import ClassField
from sits.tenants import codec
from sits.tenants.records import Budget, Limits

Name = Annotated[StrictStr, Field(min_length=1, max_length=200)]
Ident = Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
ModelPattern = Annotated[StrictStr, Field(min_length=1, max_length=200)]
Count = Annotated[StrictInt, Field(ge=1)]
Usd = Annotated[StrictFloat, Field(ge=0, allow_inf_nan=False)]
UnixSeconds = Annotated[StrictFloat, Field(gt=0, allow_inf_nan=False)]
Metadata = Annotated[dict[Annotated[StrictStr, Field(min_length=1, max_length=64)],
                          Annotated[StrictStr, Field(max_length=1024)]], Field(max_length=64)]
MAX_OVERLAP_S = 30 * 86_400.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class LimitsBody(_Strict):
    rpm: Count | None = None
    tpm: Count | None = None
    concurrency: Count | None = None

    def record(self) -> Limits:
        return Limits(rpm=self.rpm, tpm=self.tpm, concurrency=self.concurrency)


class BudgetBody(_Strict):
    period: Literal["daily", "weekly", "monthly", "total"]
    hard_usd: Usd | None = None
    soft_usd: Usd | None = None

    @model_validator(mode="after")
    def _amounts(self) -> BudgetBody:
        if self.hard_usd is None and self.soft_usd is None:
            raise ValueError("budget: give hard_usd, soft_usd or both")
        if self.hard_usd is not None and self.soft_usd is not None and self.soft_usd > self.hard_usd:
            raise ValueError("budget.soft_usd: must not exceed hard_usd")
        return self

    def record(self) -> Budget:
        return Budget(period=self.period, hard_usd=self.hard_usd, soft_usd=self.soft_usd)


class _Update(_Strict):
    """PATCH bodies: only the fields given change; null clears a field that may be empty."""

    not_null: ClassVar[frozenset[str]] = frozenset()

    def changes(self) -> dict[str, Any]:
        """Record field -> value, for the fields the body gave; 422 naming a field that may not be null."""
        out: dict[str, Any] = {}
        for name in sorted(self.model_fields_set):
            value = getattr(self, name)
            if value is None and name in self.not_null:
                raise UnprocessableRequest(f"'{name}' may not be null", param=name, code="invalid_value")
            if isinstance(value, (LimitsBody, BudgetBody)):
                value = value.record()
            elif name == "metadata":
                value = codec.pairs_of(value)
            elif name == "allowed_models":
                value = tuple(value)
            elif name == "model_limits":
                value = tuple((pattern, limits.record()) for pattern, limits in value.items())
            out[name] = value
        return out


class TeamCreate(_Strict):
    team_id: Ident | None = None  # none: one is made (team_...)
    name: Name
    organisation: Name | None = None
    limits: LimitsBody = LimitsBody()
    budget: BudgetBody | None = None
    metadata: Metadata = {}


class TeamUpdate(_Update):
    not_null: ClassVar[frozenset[str]] = frozenset({"name", "limits", "metadata"})
    name: Name | None = None
    organisation: Name | None = None
    limits: LimitsBody | None = None
    budget: BudgetBody | None = None
    metadata: Metadata | None = None


class KeyCreate(_Strict):
    name: Name
    team_id: Ident
    allowed_models: Annotated[list[ModelPattern], Field(min_length=1, max_length=256)] = ["*"]
    priority: ClassField | None = None
    limits: LimitsBody = LimitsBody()
    model_limits: Annotated[dict[ModelPattern, LimitsBody], Field(max_length=256)] = {}
    budget: BudgetBody | None = None
    expires_at: UnixSeconds | None = None
    expires_in_s: Annotated[StrictFloat, Field(gt=0, allow_inf_nan=False)] | None = None
    metadata: Metadata = {}


class KeyUpdate(_Update):
    not_null: ClassVar[frozenset[str]] = frozenset({"name", "allowed_models", "limits", "model_limits", "metadata"})
    name: Name | None = None
    allowed_models: Annotated[list[ModelPattern], Field(min_length=1, max_length=256)] | None = None
    priority: ClassField | None = None
    limits: LimitsBody | None = None
    model_limits: Annotated[dict[ModelPattern, LimitsBody], Field(max_length=256)] | None = None
    budget: BudgetBody | None = None
    expires_at: UnixSeconds | None = None
    metadata: Metadata | None = None


class KeyRotation(_Strict):
    overlap_s: Annotated[StrictFloat, Field(ge=0, le=MAX_OVERLAP_S, allow_inf_nan=False)] | None = None


class KeyRevocation(_Strict):
    confirm: StrictBool = True  # an empty body is the usual form; nothing else may be given
