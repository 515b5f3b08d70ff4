"""The `cluster:` config section: how this replica finds the others and keeps in sync with them."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

PositiveFloat = Annotated[float, Field(gt=0)]


class ClusterConfig(BaseModel):
    """No transport (neither `redis_url` nor `peers`): a cluster of one; aliases still switch locally."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    # Stable across restarts, unique in the cluster. Default: "<hostname>:<port>".
    # SITS_REPLICA_ID, when set, wins (on Kubernetes: the pod name, through the downward API).
    replica_id: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$")] | None = None
    redis_url: str | None = None  # e.g. redis://10.0.0.5:6379/0
    namespace: Annotated[str, Field(min_length=1, max_length=128)] = "sits:cluster"  # Redis key prefix
    peers: list[str] = []  # other replicas' base URLs, for HTTP anti-entropy (e.g. http://10.0.0.6:8080)
    anti_entropy_s: PositiveFloat = 2.0  # full-state exchange period, on every transport
    heartbeat_s: PositiveFloat = 1.0  # how often this replica republishes its status
    member_timeout_s: PositiveFloat = 10.0  # a replica not heard from for this long no longer holds a switch back
    timeout_s: PositiveFloat = 2.0  # per Redis command / peer request
    persist: bool = True  # keep the document in the data dir, so a restart resumes acknowledged switches

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, url: str | None) -> str | None:
        if url is not None and urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"must be a redis://, rediss:// or unix:// URL, got {url!r}")
        return url

    @field_validator("peers")
    @classmethod
    def _peers(cls, peers: list[str]) -> list[str]:
        for peer in peers:
            parts = urlsplit(peer)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"each peer must be an http(s) base URL, got {peer!r}")
        return peers
