"""Static configuration (YAML): its schema, loading and strict validation.

An unknown key or a wrong type fails at startup with the path of the offending
key, e.g. `models[0].endpoints[1].url: ...`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sits.control.cluster_config import ClusterConfig
from sits.errors import ConfigError
from sits.state.admission_config import AdmissionConfig
from sits.state.semantic_cache import SemanticCacheConfig
from sits.telemetry.config import TelemetryConfig

Tier = Literal["tiny", "base", "heavy"]
Feature = Literal["tools", "vision", "json"]  # what a request may need of a model (scheduling.types.FEATURES)
PositiveFloat = Annotated[float, Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class TimeoutsConfig(_Strict):
    connect_s: PositiveFloat = 5.0
    first_byte_s: PositiveFloat = 120.0
    total_s: PositiveFloat = 600.0


class EndpointConfig(_Strict):
    url: str
    upstream_model: str | None = None
    api_key_env: str | None = None
    weight: PositiveFloat = 1.0
    timeouts: TimeoutsConfig = TimeoutsConfig()

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"must be an http(s) URL, got {url!r}")
        if not parts.hostname:
            raise ValueError(f"has no host: {url!r}")
        try:
            parts.port
        except ValueError as exc:
            raise ValueError(f"bad port in {url!r}: {exc}") from None
        return url


class LocalModelConfig(_Strict):
    gguf: str = Field(description="a GGUF file path, or package:<pip name> for the embedded models")
    prompt_format: Literal["chat-template", "plain"] = "chat-template"
    n_ctx: Annotated[int, Field(ge=128)] = 2048
    threads: Annotated[int, Field(ge=1)] = 1


class ModelConfig(_Strict):
    name: Annotated[str, Field(min_length=1)]
    tier: Tier | None = None
    description: str = ""
    aliases: list[str] = []
    endpoints: list[EndpointConfig] = []
    local: LocalModelConfig | None = None
    fallbacks: list[str] = []  # models tried in order when every endpoint of this one fails
    cache: bool = False  # answer from the semantic cache before calling an upstream
    capabilities: list[str] = []  # free-form routing labels (e.g. "regulatory-reporting")
    # What the model can take: a request that needs one it does not list (tools, an image, a JSON
    # response_format) is not sent to it. Unset: not declared, assumed able to take every feature.
    features: list[Feature] | None = None
    context_window: Annotated[int, Field(ge=1)] | None = None
    latency_p95_ms: PositiveFloat | None = None
    cost_per_1k_input: Annotated[float, Field(ge=0)] | None = None
    cost_per_1k_output: Annotated[float, Field(ge=0)] | None = None
    max_concurrency: Annotated[int, Field(ge=1)] | None = None  # caps the model's admission gate

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if bool(self.endpoints) == (self.local is not None):
            raise ValueError("give either 'endpoints' (a non-empty list) or 'local', not both or neither")
        return self


class TlsConfig(_Strict):
    """HTTPS on its own port, offering h2 and http/1.1 by ALPN (docs/grpc.md); files are PEM."""

    port: Annotated[int, Field(ge=0, le=65535)]
    cert_file: Annotated[str, Field(min_length=1)]
    key_file: Annotated[str, Field(min_length=1)]


class ServerConfig(_Strict):
    host: str | None = None
    port: Annotated[int, Field(ge=0, le=65535)] | None = None
    max_body_bytes: Annotated[int, Field(ge=1024)] = 8 * 1024 * 1024
    max_header_bytes: Annotated[int, Field(ge=1024)] = 64 * 1024
    keep_alive_timeout_s: PositiveFloat = 75.0
    drain_timeout_s: PositiveFloat = 30.0
    # Data-plane keys: the name of an environment variable holding comma-separated client keys.
    # Unset: the data plane is open (as on a laptop).
    api_keys_env: str | None = None
    # The gRPC door (sits.v1.ChatCompletions, docs/grpc.md) on this port, same host; unset: off; 0: a free port.
    grpc_port: Annotated[int, Field(ge=0, le=65535)] | None = None
    # HTTP/2 on the HTTP door (docs/grpc.md): cleartext h2 with prior knowledge on this port; unset: off.
    http2_port: Annotated[int, Field(ge=0, le=65535)] | None = None
    # The endpoint picker (Envoy ext_proc + gRPC health, docs/envoy.md) on this port; unset: off; 0: a free port.
    epp_port: Annotated[int, Field(ge=0, le=65535)] | None = None
    # Endpoints the picker lists after its pick (same model), for a proxy that retries down the list;
    # 0: the pick alone (what Envoy's ORIGINAL_DST cluster reading the header needs).
    epp_fallbacks: Annotated[int, Field(ge=0, le=8)] = 0
    tls: TlsConfig | None = None  # unset: no TLS listener

    @model_validator(mode="after")
    def _distinct_ports(self) -> ServerConfig:
        named = {"port": self.port, "grpc_port": self.grpc_port, "http2_port": self.http2_port,
                 "epp_port": self.epp_port,
                 "tls.port": self.tls.port if self.tls is not None else None}
        seen: dict[int, str] = {}
        for key, port in named.items():
            if port:  # 0 is "a free port": never a clash
                if port in seen:
                    raise ValueError(f"{key} and {seen[port]} are both {port}: each listener needs its own port")
                seen[port] = key
        return self


class HealthCheckConfig(_Strict):
    interval_s: PositiveFloat = 5.0
    timeout_s: PositiveFloat = 2.0
    healthy_threshold: Annotated[int, Field(ge=1)] = 1
    unhealthy_threshold: Annotated[int, Field(ge=1)] = 3


class ControlConfig(_Strict):
    """The control plane: admin access, where registered endpoints may point, health checks."""

    admin_key_env: str = "SITS_ADMIN_KEY"
    # Registered endpoints may not point at loopback unless this is on (it is in the embedded default).
    allow_loopback: bool = False
    # Private ranges (10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10) only when listed here, e.g. "10.0.0.0/8".
    allowed_private_cidrs: list[str] = []
    health: HealthCheckConfig = HealthCheckConfig()

    @field_validator("allowed_private_cidrs")
    @classmethod
    def _cidrs(cls, cidrs: list[str]) -> list[str]:
        import ipaddress

        for cidr in cidrs:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"not a network: {cidr!r}") from None
        return cidrs


class ResilienceConfig(_Strict):
    retry_budget_ratio: Annotated[float, Field(ge=0, le=10)] = 0.2  # at most 20% extra upstream calls
    min_retries_per_window: Annotated[int, Field(ge=0)] = 3
    max_attempts: Annotated[int, Field(ge=1, le=16)] = 4
    ttft_timeout_s: PositiveFloat = 30.0  # streaming: first event within this, else fall back
    # One deadline for the whole request, all attempts together (each attempt also has its endpoint's timeouts).
    request_timeout_s: PositiveFloat | None = None
    breaker_failure_threshold: Annotated[int, Field(ge=1)] = 5
    breaker_open_s: PositiveFloat = 5.0
    # The last step of every fallback chain: this text, as a normal answer marked `x-sits-fallback: static-template`.
    static_answer: Annotated[str, Field(min_length=1, max_length=4000)] | None = None
    # A chat stream that breaks after part of the answer went out goes on from that partial answer on
    # another endpoint or fallback model (assistant prefix), instead of ending with an error event.
    resume_streams: bool = False


class KvMigrationConfig(_Strict):
    """Moving llama.cpp conversations' KV caches between instances of the same model (docs/kv-cache.md)."""

    # off: needs every instance started with --slot-save-path on one folder they all see
    enabled: bool = False
    min_tokens: Annotated[int, Field(ge=1)] = 512  # slots caching fewer prompt tokens are not worth moving
    max_slots: Annotated[int, Field(ge=1, le=256)] = 16  # per draining endpoint, longest caches first
    timeout_s: PositiveFloat = 60.0  # per slot action; a save waits for its slot's generation to end
    # The shared folder as SITS sees it (optional): migrated files are deleted from it once restored.
    shared_dir: str | None = None


class GatewayConfig(_Strict):
    server: ServerConfig = ServerConfig()
    resilience: ResilienceConfig = ResilienceConfig()
    kv_migration: KvMigrationConfig = KvMigrationConfig()
    semantic_cache: SemanticCacheConfig = SemanticCacheConfig()
    admission: AdmissionConfig = AdmissionConfig()
    # Routing policy (profiles of filters, scorers, picker): validated by sits.scheduling.policy at startup,
    # since the control layer does not import scheduling. See docs/scheduling.md.
    routing: dict[str, Any] = {}
    # Request understanding for model "auto" (intent, complexity, tier, quality router): validated by
    # sits.understanding.settings at startup; off unless `enabled: true` (the embedded default keeps the tier rule).
    understanding: dict[str, Any] = {}
    # Fusion workflows (`model: workflow:<name>`) and the files requests may attach: validated by
    # sits.pipeline.fusion.spec at startup, since the control layer does not import pipeline. See docs/workflows.md.
    workflows: dict[str, Any] = {}
    attachments: dict[str, Any] = {}
    # Teams, keys and the spend log: validated by sits.tenants.config at startup (docs/tenants.md).
    tenants: dict[str, Any] = {}
    control: ControlConfig = ControlConfig()
    cluster: ClusterConfig = ClusterConfig()  # replicas sharing aliases and state (docs/replication.md)
    telemetry: TelemetryConfig = TelemetryConfig()
    # true: the embedded local models are served too, next to `models` (a model of the same name wins)
    include_embedded_models: bool = False
    models: list[ModelConfig] = []
    aliases: dict[str, str] = {}

    @model_validator(mode="after")
    def _names(self) -> GatewayConfig:
        seen: set[str] = set()
        for i, m in enumerate(self.models):
            if m.name in seen:
                raise ValueError(f"models[{i}].name: duplicate model name {m.name!r}")
            seen.add(m.name)
        aliases = dict(self.aliases)
        for m in self.models:
            for a in m.aliases:
                aliases[a] = m.name
        for i, m in enumerate(self.models):
            for j, fallback in enumerate(m.fallbacks):
                if fallback not in seen or fallback == m.name:
                    raise ValueError(f"models[{i}].fallbacks[{j}]: {fallback!r} is not another configured model")
        for alias, target in aliases.items():
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


def config_error(exc: ValidationError, source: str) -> ConfigError:
    """A validation error as one ConfigError that names the path of every offending key."""
    lines = [f"{source}: {_path(e['loc'])}: {_message(e)}" for e in exc.errors(include_url=False)]
    return ConfigError("invalid configuration:\n  " + "\n  ".join(lines))


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _message(error: dict) -> str:  # type: ignore[type-arg]
    if error["type"] == "extra_forbidden":
        return "unknown key"
    return str(error["msg"]).removeprefix("Value error, ")
