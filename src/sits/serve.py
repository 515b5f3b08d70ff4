"""Process lifecycle for `sits serve`: one gateway per process, N processes on one port."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import shutil
import signal
import socket

import uvloop

from sits.app import Gateway
from sits.backends.local.supervisor import LocalWorkerPool
from sits.configuration.gateway import GatewayConfig
from sits.control.config import EndpointConfig
from sits.control.local_models import local_model_specs
from sits.settings import Settings
from sits.runtime.gc_tuning import freeze_startup_heap
from sits.telemetry.logging_setup import configure_logging

log = logging.getLogger("sits")


def run(settings: Settings, config: GatewayConfig) -> None:
    if settings.workers <= 1:
        uvloop.run(_serve_one(settings, config, reuse_port=False))
    else:
        uvloop.run(_serve_many(settings, config))


async def _serve_one(settings: Settings, config: GatewayConfig, reuse_port: bool) -> None:
    gateway = Gateway(settings, config)
    sock = _reuse_port_socket(gateway.host, gateway.port) if reuse_port else None
    await gateway.start(sock)
    freeze_startup_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"sits ready on http://{gateway.host}:{gateway.bound_port}", flush=True)
    if gateway.grpc is not None:
        print(f"sits gRPC ready on {gateway.host}:{gateway.grpc.bound_port}", flush=True)
    if gateway.epp is not None:
        print(f"sits endpoint picker (ext_proc) ready on {gateway.host}:{gateway.epp.bound_port}", flush=True)
    if gateway.http2 is not None and gateway.http2.h2c_bound_port is not None:
        print(f"sits HTTP/2 (h2c) ready on http://{gateway.host}:{gateway.http2.h2c_bound_port}", flush=True)
    if gateway.http2 is not None and gateway.http2.tls_bound_port is not None:
        print(f"sits HTTPS (h2, http/1.1) ready on https://{gateway.host}:{gateway.http2.tls_bound_port}", flush=True)
    await stop.wait()
    log.info("shutting down: draining in-flight requests")
    await gateway.stop()


async def _serve_many(settings: Settings, config: GatewayConfig) -> None:
    """Local model workers are started once, here; the N gateway processes share them as endpoints."""
    specs = local_model_specs(config.models)
    local = LocalWorkerPool() if specs else None
    urls = dict(await local.start(specs, settings.data_dir)) if local is not None else {}
    shared = with_local_urls(config, urls)
    ctx = multiprocessing.get_context("spawn")
    # One folder per run, shared by its workers: metrics and dashboard state, uploads, the cluster document
    # (runtime/worker_share.py); the registry's SQLite store is shared through the data dir itself.
    share_dir = settings.data_dir / "run" / f"workers-{os.getpid()}"
    children = [ctx.Process(target=_child, args=(settings.with_overrides(worker_index=i, worker_share_dir=share_dir),
                                                 shared), daemon=False)
                for i in range(settings.workers)]
    for child in children:
        child.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for child in children:
        if child.pid is not None and child.is_alive():
            child.terminate()  # SIGTERM: each child drains on its own
    for child in children:
        await asyncio.to_thread(child.join, _drain_bound(shared))
    if local is not None:
        await local.stop()
    shutil.rmtree(share_dir, ignore_errors=True)


def with_local_urls(config: GatewayConfig, urls: dict[str, str]) -> GatewayConfig:
    """The config the worker processes share: each local model becomes a model served at its worker's
    URL, with everything else it declares kept (window, capabilities, fallbacks, prices...)."""
    return config.model_copy(update={"models": [
        m.model_copy(update={"local": None, "endpoints": [EndpointConfig(url=urls[m.name], upstream_model=m.name)]})
        if m.local is not None else m
        for m in config.models
    ]})


def _drain_bound(config: GatewayConfig) -> float:
    return config.server.drain_timeout_s + 5.0


def _child(settings: Settings, config: GatewayConfig) -> None:
    configure_logging(settings.log_level, settings.log_format)
    uvloop.run(_serve_one(settings, config, reuse_port=True))


def _reuse_port_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock
