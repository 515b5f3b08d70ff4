"""The `sits` command line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sits import __version__
from sits.cli.cluster import add_cluster_commands
from sits.configuration.gateway import GatewayConfig, load_config, with_server
from sits.configuration.embedded_default import config_from_backends, embedded_default_config, with_embedded_models
from sits.errors import ConfigError
from sits.cli.models import add_models_commands
from sits.cli.tenants import add_tenant_commands
from sits.settings import Settings
from sits.simulate import add_simulate_command
from sits.telemetry.logging_setup import configure_logging
from sits.understanding.cli_commands import add_intent_commands, add_router_commands


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.run(args))
    except ConfigError as exc:
        print(f"sits: {exc.message}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sits", description="SITS multi-model inference gateway")
    parser.add_argument("--version", action="version", version=f"sits {__version__}")
    sub = parser.add_subparsers(dest="command")

    serve = sub.add_parser("serve", help="run the gateway (with no config: two embedded local models)")
    serve.add_argument("--config", type=Path, help="YAML config file (default: $SITS_CONFIG)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8080)")
    serve.add_argument("--workers", type=int, help="gateway processes sharing the port (default 1)")
    serve.add_argument("--backend", action="append", default=[], metavar="NAME=URL",
                       help="front an OpenAI-compatible server without a config file (repeatable)")
    serve.add_argument("--log-level", help="debug, info, warning, error")
    serve.add_argument("--grpc-port", type=int, help="also serve gRPC (docs/grpc.md) on this port, e.g. 50051")
    serve.add_argument("--http2-port", type=int,
                       help="also serve HTTP/2 cleartext (h2c, prior knowledge; docs/grpc.md) on this port")
    serve.add_argument("--epp-port", type=int,
                       help="also serve Envoy's ext_proc endpoint-picker protocol and gRPC health "
                            "(docs/envoy.md) on this port, e.g. 9002")
    serve.set_defaults(run=_serve)

    chat = sub.add_parser("chat", help="ask one question through a gateway and stream the answer")
    chat.add_argument("question")
    chat.add_argument("--url", default=None, help="gateway base URL (default: http://127.0.0.1:8080)")
    chat.add_argument("--model", default="auto")
    chat.add_argument("--max-tokens", type=int, default=128)
    chat.add_argument("--grpc", nargs="?", const="127.0.0.1:50051", metavar="HOST:PORT",
                      help="ask over the gRPC door instead (default 127.0.0.1:50051)")
    chat.add_argument("--compression", choices=("none", "gzip", "lz4"), default="none", help="with --grpc")
    chat.set_defaults(run=_chat)

    add_models_commands(sub)
    add_tenant_commands(sub)
    add_cluster_commands(sub)
    add_simulate_command(sub)
    add_intent_commands(sub)
    add_router_commands(sub)
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(os.environ).with_overrides(
        host=getattr(args, "host", None), port=getattr(args, "port", None),
        workers=getattr(args, "workers", None), config_path=getattr(args, "config", None),
        log_level=getattr(args, "log_level", None),
    )


def _gateway_config(settings: Settings, backends: list[str]) -> GatewayConfig:
    if backends and settings.config_path:
        raise ConfigError("give either --config or --backend, not both")
    if backends:
        return config_from_backends(backends)
    if settings.config_path:
        return with_embedded_models(load_config(settings.config_path))
    return embedded_default_config()


def _serve(args: argparse.Namespace) -> int:
    from sits.serve import run

    settings = _settings(args)
    configure_logging(settings.log_level, settings.log_format)
    config = _gateway_config(settings, args.backend)
    ports = {key: getattr(args, key) for key in ("grpc_port", "epp_port", "http2_port") if getattr(args, key) is not None}
    if ports:
        config = with_server(config, **ports)
    run(settings, config)
    return 0


def _chat(args: argparse.Namespace) -> int:
    if args.grpc is not None:
        from sits.cli.grpc_chat import chat_grpc

        return chat_grpc(args.question, args.grpc, args.model, args.max_tokens, args.compression)
    from sits.cli.chat import chat

    return chat(args.question, base_url=args.url, model=args.model, max_tokens=args.max_tokens)


if __name__ == "__main__":
    sys.exit(main())
