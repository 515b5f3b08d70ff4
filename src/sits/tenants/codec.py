"""Tenant records <-> the JSON the store keeps in text columns and the admin API shows."""

from __future__ import annotations

from typing import Any

import orjson

from sits.tenants.records import Budget, Limits


def limits_dict(limits: Limits) -> dict[str, int | None]:
    return {"rpm": limits.rpm, "tpm": limits.tpm, "concurrency": limits.concurrency}


def limits_of(data: dict[str, Any] | None) -> Limits:
    data = data or {}
    return Limits(rpm=data.get("rpm"), tpm=data.get("tpm"), concurrency=data.get("concurrency"))


def budget_dict(budget: Budget | None) -> dict[str, Any] | None:
    if budget is None:
        return None
    return {"period": budget.period, "hard_usd": budget.hard_usd, "soft_usd": budget.soft_usd}


def budget_of(data: dict[str, Any] | None) -> Budget | None:
    if not data:
        return None
    return Budget(period=data["period"], hard_usd=data.get("hard_usd"), soft_usd=data.get("soft_usd"))


def model_limits_dict(model_limits: tuple[tuple[str, Limits], ...]) -> dict[str, dict[str, int | None]]:
    return {pattern: limits_dict(limits) for pattern, limits in model_limits}


def model_limits_of(data: dict[str, Any] | None) -> tuple[tuple[str, Limits], ...]:
    return tuple((pattern, limits_of(limits)) for pattern, limits in (data or {}).items())


def pairs_of(data: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple((data or {}).items())


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def loads(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)
