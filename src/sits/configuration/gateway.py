"""The whole configuration (YAML): one schema composed from every layer's section schema.

Each layer owns the schema of its section (the routing policy in `scheduling`, request understanding in
`understanding`, workflows and attachments in `pipeline.fusion`, tenants in `tenants`, the control plane's
sections in `control.config`); they are composed here, above all of them, so a config is validated whole
when it is loaded, and an error names the path of the offending key (`routing.profiles.default...`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError, field_validator, model_validator

from sits.control.cluster_config import ClusterConfig
from sits.control.config import (
    ControlConfig,
    KvMigrationConfig,
    ModelConfig,
    ResilienceConfig,
    ServerConfig,
    Strict,
    config_error,
)
from sits.errors import ConfigError
from sits.pipeline.fusion.spec import AttachmentLimits, WorkflowsConfig
from sits.scheduling.policy import RoutingPolicy
from sits.state.admission_config import AdmissionConfig
from sits.state.response_store import ResponsesConfig
from sits.state.semantic_cache import SemanticCacheConfig
from sits.telemetry.config import TelemetryConfig
from sits.tenants.config import TenantsConfig
from sits.understanding.settings import UnderstandingConfig


class GatewayConfig(Strict):
    server: ServerConfig = ServerConfig()
    resilience: ResilienceConfig = ResilienceConfig()
    kv_migration: KvMigrationConfig = KvMigrationConfig()
    semantic_cache: SemanticCacheConfig = SemanticCacheConfig()
    admission: AdmissionConfig = AdmissionConfig()
    responses: ResponsesConfig = ResponsesConfig()  # stored Responses (docs/responses-and-messages.md)
    # Routing policy: profiles of filters, scorers and a picker (docs/scheduling.md).
    routing: RoutingPolicy = RoutingPolicy()
    # Request understanding for model "auto" (intent, complexity, tier, quality router); off unless the
    # section says `enabled: true` (the embedded default keeps the tier rule).
    understanding: UnderstandingConfig = UnderstandingConfig(enabled=False)
    # Fusion workflows (`model: workflow:<name>`) and the files requests may attach (docs/workflows.md).
    workflows: WorkflowsConfig = WorkflowsConfig({})
    attachments: AttachmentLimits = AttachmentLimits()
    # Teams, keys, limits, budgets and the spend log (docs/tenants.md); off by default.
    tenants: TenantsConfig = TenantsConfig()
    control: ControlConfig = ControlConfig()
    cluster: ClusterConfig = ClusterConfig()  # replicas sharing aliases and state (docs/replication.md)
    telemetry: TelemetryConfig = TelemetryConfig()
    # true: the embedded local models are served too, next to `models` (a model of the same name wins)
    include_embedded_models: bool = False
    models: list[ModelConfig] = []
    aliases: dict[str, str] = {}

    @field_validator("understanding", mode="before")
    @classmethod
    def _understanding_off_unless_enabled(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and "enabled" not in raw:
            return {"enabled": False, **raw}
        return raw

    @model_validator(mode="after")
    def _names(self) -> GatewayConfig:
        seen: set[str] = set()
        for i, m in enumerate(self.models):
            if m.name in seen:
                raise ValueError(f"models[{i}].name: duplicate model name {m.name!r}")
            seen.add(m.name)
        for i, m in enumerate(self.models):
            for j, fallback in enumerate(m.fallbacks):
                if fallback not in seen or fallback == m.name:
                    raise ValueError(f"models[{i}].fallbacks[{j}]: {fallback!r} is not another configured model")
        for alias, target in self.all_aliases().items():
            if alias in seen:
                raise ValueError(f"aliases.{alias}: alias clashes with a model of the same name")
            if target not in seen:
                raise ValueError(f"aliases.{alias}: points to unknown model {target!r}")
        return self

    def all_aliases(self) -> dict[str, str]:
        aliases = dict(self.aliases)
        for m in self.models:
            for a in m.aliases:
                aliases[a] = m.name
        return aliases


def with_server(config: GatewayConfig, **settings: object) -> GatewayConfig:
    """`config` with these `server:` keys set (the command line's --grpc-port, --epp-port, --http2-port),
    validated as the YAML keys are."""
    try:
        server = ServerConfig.model_validate({**config.server.model_dump(), **settings})
    except ValidationError as exc:
        raise config_error(exc, "server") from None
    return config.model_copy(update={"server": server})


def with_sections(config: GatewayConfig, source: str = "config", **sections: object) -> GatewayConfig:
    """`config` with these top-level sections replaced by raw (YAML-shaped) values, validated as a file's are."""
    fields = {name: getattr(config, name) for name in GatewayConfig.model_fields}
    return parse_config({**fields, **sections}, source=source)


def load_config(path: Path) -> GatewayConfig:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    return parse_config(raw if raw is not None else {}, source=str(path))


def parse_config(raw: object, source: str = "config") -> GatewayConfig:
    try:
        return GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        raise config_error(exc, source) from None
