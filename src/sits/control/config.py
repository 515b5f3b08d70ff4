"""The control plane's config sections (server, models, resilience, control, ...) and how a validation
error is reported.

The whole configuration is composed from these and the other layers' sections in
`sits.configuration.gateway`. An unknown key or a wrong type fails at load with the path of the
offending key, e.g. `models[0].endpoints[1].url: ...`.
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sits.errors import ConfigError
from sits.state.token_price import Price

Tier = Literal["tiny", "base", "heavy"]
Feature = Literal["tools", "vision", "json"]  # what a request may need of a model (scheduling.types.FEATURES)
PositiveFloat = Annotated[float, Field(gt=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class TimeoutsConfig(Strict):
    connect_s: PositiveFloat = 5.0
    first_byte_s: PositiveFloat = 120.0
    total_s: PositiveFloat = 600.0


class PriceConfig(Strict):
    """USD per million tokens by kind (docs/limits-and-budgets.md); unset kinds of the optional two
    fall back to input (cached input) and output (reasoning)."""

    input: Annotated[float, Field(ge=0)] = 0.0
    cached_input: Annotated[float, Field(ge=0)] | None = None
    output: Annotated[float, Field(ge=0)] = 0.0
    reasoning: Annotated[float, Field(ge=0)] | None = None

    def price(self) -> Price:
        return Price(self.input, self.cached_input, self.output, self.reasoning)


class EndpointConfig(Strict):
    url: str
    upstream_model: str | None = None
    api_key_env: str | None = None
    weight: PositiveFloat = 1.0
    timeouts: TimeoutsConfig = TimeoutsConfig()
    # The HTTP API the endpoint speaks: OpenAI's (chat/completions), Anthropic's (/v1/messages, translated
    # both ways in the send step) or OpenAI's with the Responses API too (/v1/responses requests passed
    # through as sent; docs/responses-and-messages.md)
    api: Literal["openai", "anthropic", "responses"] = "openai"
    price: PriceConfig | None = None  # this endpoint's own price (a provider's); unset: the model's

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


class LocalModelConfig(Strict):
    gguf: str = Field(description="a GGUF file path, or package:<pip name> for the embedded models")
    prompt_format: Literal["chat-template", "plain"] = "chat-template"
    n_ctx: Annotated[int, Field(ge=128)] = 2048
    threads: Annotated[int, Field(ge=1)] = 1


class ModelConfig(Strict):
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
    # USD per million tokens by kind; `cost_per_1k_input/output` say the same per thousand (give one form).
    price: PriceConfig | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if bool(self.endpoints) == (self.local is not None):
            raise ValueError("give either 'endpoints' (a non-empty list) or 'local', not both or neither")
        if self.price is not None and (self.cost_per_1k_input is not None or self.cost_per_1k_output is not None):
            raise ValueError("price: give either 'price' (per million tokens) or 'cost_per_1k_input/output', not both")
        return self


class TlsConfig(Strict):
    """HTTPS on its own port, offering h2 and http/1.1 by ALPN (docs/grpc.md); files are PEM."""

    port: Annotated[int, Field(ge=0, le=65535)]
    cert_file: Annotated[str, Field(min_length=1)]
    key_file: Annotated[str, Field(min_length=1)]


class ServerConfig(Strict):
    host: str | None = None
    port: Annotated[int, Field(ge=0, le=65535)] | None = None
    max_body_bytes: Annotated[int, Field(ge=1024)] = 8 * 1024 * 1024
    max_header_bytes: Annotated[int, Field(ge=1024)] = 64 * 1024
    keep_alive_timeout_s: PositiveFloat = 75.0
    # Idle connections to model servers are closed after this: under the 5 s after which uvicorn (vLLM,
    # SGLang) and llama-server close them, so a request never goes onto one the server is closing.
    upstream_keep_alive_s: PositiveFloat = 4.0
    # Cyclic garbage collected and free heap given back to the system this often (a full collection, then
    # glibc's malloc_trim; runtime/heap_trim.py); 0: never.
    heap_trim_s: Annotated[float, Field(ge=0)] = 30.0
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


class HealthCheckConfig(Strict):
    interval_s: PositiveFloat = 5.0
    timeout_s: PositiveFloat = 2.0
    healthy_threshold: Annotated[int, Field(ge=1)] = 1
    unhealthy_threshold: Annotated[int, Field(ge=1)] = 3


class ControlConfig(Strict):
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


class ResilienceConfig(Strict):
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


class KvMigrationConfig(Strict):
    """Moving llama.cpp conversations' KV caches between instances of the same model (docs/kv-cache.md)."""

    # off: needs every instance started with --slot-save-path on one folder they all see
    enabled: bool = False
    min_tokens: Annotated[int, Field(ge=1)] = 512  # slots caching fewer prompt tokens are not worth moving
    max_slots: Annotated[int, Field(ge=1, le=256)] = 16  # per draining endpoint, longest caches first
    timeout_s: PositiveFloat = 60.0  # per slot action; a save waits for its slot's generation to end
    # The shared folder as SITS sees it (optional): migrated files are deleted from it once restored.
    shared_dir: str | None = None


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
