"""Process settings, read from the environment here and nowhere else."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from sits.errors import ConfigError

DEFAULT_DATA_DIR = Path.home() / ".local" / "share" / "sits"
# What `cluster.replica_id` accepts (control/cluster_config.py), up to 128 characters.
REPLICA_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$"


@dataclass(frozen=True, slots=True)
class Settings:
    host: str | None = None
    port: int | None = None
    config_path: Path | None = None
    workers: int = 1
    worker_index: int | None = None  # set by `--workers N` for each gateway process (0..N-1), never from the env
    # Set with worker_index: the folder the workers share /metrics and the dashboard through
    # (runtime/worker_share.py).
    worker_share_dir: Path | None = None
    log_level: str = "info"
    log_format: str = "json"  # json or text
    # OpenTelemetry: the standard OTLP endpoint variable, and the sampling ratio (None: by environment).
    otel_endpoint: str | None = None
    otel_sampling_ratio: float | None = None
    data_dir: Path = field(default_factory=lambda: DEFAULT_DATA_DIR)
    # This replica's id in the cluster (docs/replication.md); wins over `cluster.replica_id`.
    replica_id: str | None = None
    # The environment, for secrets named in config (api_key_env); never logged.
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)

    def replica_of(self, base: str) -> str:
        """Each `--workers` process is a replica of its own (own clock, own snapshot), stable across restarts."""
        return base if self.worker_index is None else f"{base}#w{self.worker_index}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        def integer(name: str) -> int | None:
            value = environ.get(name)
            if value in (None, ""):
                return None
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"environment variable {name} must be an integer, got {value!r}") from None

        def ratio(name: str) -> float | None:
            value = environ.get(name)
            if value in (None, ""):
                return None
            try:
                parsed = float(value)
            except ValueError:
                parsed = -1.0
            if not 0.0 <= parsed <= 1.0:
                raise ConfigError(f"environment variable {name} must be a number in [0, 1], got {value!r}")
            return parsed

        log_format = environ.get("SITS_LOG_FORMAT", "json")
        if log_format not in ("json", "text"):
            raise ConfigError(f"environment variable SITS_LOG_FORMAT must be json or text, got {log_format!r}")
        replica = environ.get("SITS_REPLICA_ID") or None
        if replica is not None and (len(replica) > 128 or not re.match(REPLICA_ID_PATTERN, replica)):
            raise ConfigError(f"environment variable SITS_REPLICA_ID must be 1-128 characters of letters, digits and "
                              f"._:@- starting with a letter or digit, got {replica!r}")
        config = environ.get("SITS_CONFIG")
        data_dir = environ.get("SITS_DATA_DIR")
        return cls(
            host=environ.get("SITS_HOST") or None,
            port=integer("SITS_PORT"),
            config_path=Path(config) if config else None,
            workers=integer("SITS_WORKERS") or 1,
            log_level=environ.get("SITS_LOG_LEVEL", "info"),
            log_format=log_format,
            otel_endpoint=environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or None,
            otel_sampling_ratio=ratio("OTEL_SAMPLING_RATIO"),
            data_dir=Path(data_dir) if data_dir else DEFAULT_DATA_DIR,
            replica_id=replica,
            secrets=dict(environ),
        )

    def with_overrides(self, **changes: object) -> Settings:
        """Command-line flags win over the environment; None means 'not given'."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[arg-type]
