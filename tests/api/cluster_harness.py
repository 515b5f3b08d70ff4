"""A cluster of real `sits serve` processes for end-to-end tests, plus a real redis-server.

Every process binds 127.0.0.1 on a free port; nothing leaves loopback. All waits are bounded.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ADMIN_KEY = "cluster-admin-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def eventually(check: Callable[[], Awaitable[Any]], within_s: float, what: str, every_s: float = 0.05) -> Any:
    """Poll `check` until it returns something truthy; fail after `within_s` with the last value."""
    deadline = time.monotonic() + within_s
    last: Any = None
    while True:
        try:
            last = await check()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within_s}s; last: {last!r}")
        await asyncio.sleep(every_s)


class RedisServer:
    def __init__(self) -> None:
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        server = shutil.which("redis-server")
        assert server is not None, "redis-server is not installed"
        self._proc = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()  # no goodbye to the clients: the partition is abrupt
            self._proc.wait(timeout=10)
        self._proc = None


class ReplicaProcess:
    """One `python -m sits serve` process with its own data dir and log file."""

    def __init__(self, name: str, port: int, workdir: Path, config: dict[str, Any]) -> None:
        self.name = name
        self.port = port
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.dir / "config.yaml"
        self.config_path.write_bytes(orjson.dumps(config))  # JSON is YAML
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "SITS_ADMIN_KEY": ADMIN_KEY, "SITS_DATA_DIR": str(self.dir / "data")}
        log = open(self.dir / "gateway.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sits", "serve", "--config", str(self.config_path), "--port", str(self.port),
             "--log-level", "warning"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    async def wait_ready(self, session: aiohttp.ClientSession, within_s: float = 20.0) -> None:
        async def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited: {self.log_tail()}")
            async with session.get(self.url + "/readyz") as r:
                return r.status == 200
        await eventually(ready, within_s, f"{self.name} ready", every_s=0.1)

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def freeze(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log_tail(self, n: int = 2000) -> str:
        try:
            return (self.dir / "gateway.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""


class AdminClient:
    """The admin API of each replica, over one aiohttp session."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.headers = {"Authorization": f"Bearer {ADMIN_KEY}"}

    async def get(self, replica: ReplicaProcess, path: str) -> Any:
        async with self.session.get(replica.url + path, headers=self.headers) as r:
            assert r.status == 200, await r.text()
            return await r.json()

    async def switch(self, replica: ReplicaProcess, alias: str, to: str, canary_weight: float | None = None
                     ) -> tuple[int, Any]:
        body: dict[str, Any] = {"to": to}
        if canary_weight is not None:
            body["canary_weight"] = canary_weight
        async with self.session.post(f"{replica.url}/v1/aliases/{alias}/switch", json=body,
                                     headers=self.headers) as r:
            return r.status, await r.json()

    async def alias(self, replica: ReplicaProcess, alias: str) -> dict[str, Any]:
        data = await self.get(replica, "/v1/aliases")
        return next(a for a in data["data"] if a["alias"] == alias)
