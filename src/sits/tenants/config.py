"""The `tenants:` section of the gateway config: where keys and spend are stored, how limits are shared."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

PositiveFloat = Annotated[float, Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SpendLogConfig(_Strict):
    flush_interval_s: PositiveFloat = 1.0  # a crash loses at most this long's rows (plus one batch in flight)
    batch_rows: Annotated[int, Field(ge=1)] = 5000
    queue_rows: Annotated[int, Field(ge=1)] = 200_000  # beyond: rows are counted as dropped, never block a request
    retention_days: Annotated[int, Field(ge=1)] | None = 90  # per-request rows; daily roll-ups are kept


class LimitsConfig(_Strict):
    # Redis shared by every replica for limits and budget reservations; unset: each replica alone.
    redis_url: str | None = None
    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, url: str | None) -> str | None:
        if url is not None and urlsplit(url).scheme not in ("redis", "rediss"):
            raise ValueError(f"must be a redis:// or rediss:// URL, got {url!r}")
        return url

    # Output tokens reserved at admission when the request names no max_tokens.
    default_output_reservation: Annotated[int, Field(ge=1)] = 1024
    # A keyed chat stream without `stream_options` asks its upstream for the usage event (settled on it;
    # the client does not see it). Off for upstreams that refuse `stream_options`: the text is counted.
    ask_stream_usage: bool = True
    # One admission's Redis call may take this long; beyond, this replica counts alone (its share).
    redis_timeout_s: PositiveFloat = 0.5
    # While Redis is unreachable, one request every this many seconds tries it again.
    retry_redis_s: PositiveFloat = 1.0
    # A concurrency slot a replica took and never gave back (it died) frees itself after this long.
    concurrency_lease_s: PositiveFloat = 600.0
    # Per-replica credits (tenants/credits.py): where every limit of a request's key, team and model is
    # large (rpm >= 600, tpm >= 100,000, concurrency >= 32; budgets any), a replica takes many requests' worth
    # from Redis at once and admits them in memory for at most this long (bounds: docs/limits-and-budgets.md).
    # null: every request admitted on Redis.
    credit_s: Annotated[float, Field(gt=0, le=5)] | None = 0.5
    # Admissions per Redis call: a call goes as soon as this many wait, so Redis works on it while the
    # gateway reads the rest of the loop turn's requests (0: one call per loop turn, however many).
    max_batch: Annotated[int, Field(ge=0, le=10_000)] = 8
    # Every counter's Redis key starts with this (several gateways may share one Redis).
    key_prefix: Annotated[str, Field(min_length=1, max_length=64)] = "sits:lim:"
    # Distinct team label values in metrics; later teams are counted as "other".
    max_team_labels: Annotated[int, Field(ge=1, le=10_000)] = 100


class TenantsConfig(_Strict):
    """Off by default: the data plane then keeps `server.api_keys_env` (or stays open)."""

    enabled: bool = False
    # "sqlite:///<path>" (the default lives in the data dir) or "postgresql://user@host:port/db".
    database_url: str | None = None
    # Environment variable holding the secret under which key hashes are computed (HMAC-SHA256).
    key_secret_env: str = "SITS_KEY_SECRET"
    # How often each replica re-reads keys/teams when the store's version moved (revocation bound).
    refresh_s: PositiveFloat = 1.0
    # How long a rotated key's old secret keeps working when the rotation names no overlap_s.
    rotation_overlap_s: Annotated[float, Field(ge=0)] = 3600.0
    spend_log: SpendLogConfig = SpendLogConfig()
    limits: LimitsConfig = LimitsConfig()
