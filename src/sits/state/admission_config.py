"""The `admission:` block of the gateway config: priority classes, queues and concurrency limiters.

Here in state/ so both the config loader (control/) and the admission gate (pipeline/) can use it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

ClassName = Literal["P0", "P1", "P2"]


_SPELLINGS = {
    "p0": "P0", "0": "P0", "realtime": "P0", "real-time": "P0",
    "p1": "P1", "1": "P1", "interactive": "P1",
    "p2": "P2", "2": "P2", "batch": "P2",
}


def _class_name(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return _SPELLINGS.get(value.strip().lower(), value) if isinstance(value, str) else value


ClassField = Annotated[ClassName, BeforeValidator(_class_name)]
_NonNegInt = Annotated[int, Field(ge=0)]
_Share = Annotated[float, Field(gt=0, le=1)]
_Seconds = Annotated[float, Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class QueueSizes(_Strict):
    P0: _NonNegInt = 64
    P1: _NonNegInt = 256
    P2: _NonNegInt = 1024


class SlotShares(_Strict):
    P0: _Share = 1.0
    P1: _Share = 1.0
    P2: _Share = 0.8


class MaxWait(_Strict):
    P0: _Seconds = 5.0
    P1: _Seconds = 30.0
    P2: _Seconds = 120.0


class FixedLimitConfig(_Strict):
    type: Literal["fixed"] = "fixed"
    limit: Annotated[int, Field(ge=1)] = 64  # per endpoint


class AimdLimitConfig(_Strict):
    type: Literal["aimd"] = "aimd"
    initial: Annotated[int, Field(ge=1)] = 16
    min: Annotated[int, Field(ge=1)] = 4
    max: Annotated[int, Field(ge=1)] = 512
    latency_target_s: _Seconds = 2.0
    increase: _Seconds = 1.0
    backoff: Annotated[float, Field(gt=0, lt=1)] = 0.9
    decrease_cooldown_s: Annotated[float, Field(ge=0)] = 1.0


class GradientLimitConfig(_Strict):
    type: Literal["gradient"] = "gradient"
    initial: Annotated[int, Field(ge=1)] = 16
    min: Annotated[int, Field(ge=1)] = 4
    max: Annotated[int, Field(ge=1)] = 512
    tolerance: Annotated[float, Field(ge=1)] = 1.2
    rtt_floor_s: Annotated[float, Field(ge=0)] = 0.02  # RTTs below never count as congestion
    smoothing: Annotated[float, Field(gt=0, le=1)] = 0.2
    queue_allowance: _NonNegInt = 2
    long_window: Annotated[int, Field(ge=1)] = 600
    warmup: _NonNegInt = 10


class EnginePressureConfig(_Strict):
    kv_high: Annotated[float, Field(ge=0, lt=1)] = 0.85
    queue_allowance: _NonNegInt = 4
    min_factor: _Share = 0.5


class AdmissionConfig(_Strict):
    enabled: bool = True
    default_priority: ClassField = "P1"
    priority_by_model: dict[str, ClassField] = {}
    priority_by_key_sha256: dict[str, ClassField] = {}  # sha256 hex of the API key -> class
    key_is_ceiling: bool = True
    queue_size: QueueSizes = QueueSizes()
    max_queued: _NonNegInt = 1024
    slot_share: SlotShares = SlotShares()
    max_wait_s: MaxWait = MaxWait()
    max_retry_after_s: Annotated[int, Field(ge=1)] = 60
    limiter: Annotated[FixedLimitConfig | AimdLimitConfig | GradientLimitConfig,
                       Field(discriminator="type")] = GradientLimitConfig()
    engine_pressure: EnginePressureConfig = EnginePressureConfig()

    @field_validator("priority_by_key_sha256")
    @classmethod
    def _digests(cls, keys: dict[str, str]) -> dict[str, str]:
        for digest in keys:
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError(f"keys must be lower-case SHA-256 hex digests of API keys, got {digest[:12]!r}...")
        return keys

    @model_validator(mode="after")
    def _consistent(self) -> AdmissionConfig:
        s = self.slot_share
        if not s.P0 >= s.P1 >= s.P2:
            raise ValueError("slot_share must not increase from P0 to P2 (priority would stop being strict)")
        lim = self.limiter
        if not isinstance(lim, FixedLimitConfig) and not lim.min <= lim.initial <= lim.max:
            raise ValueError(f"limiter: need min <= initial <= max, got {lim.min}, {lim.initial}, {lim.max}")
        return self
