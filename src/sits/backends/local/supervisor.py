"""Starts, watches and stops one worker process per embedded local model.

The pool hands the gateway plain base URLs (`http://127.0.0.1:PORT/v1`); from
there on a local model is an ordinary OpenAI-compatible upstream. A worker that
crashes is restarted on the same port with a bounded backoff, so the URL the
routing table holds stays valid.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import socket
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import aiohttp

import sits
from sits.backends.local.model_files import LocalModelSpec, resolve_gguf
from sits.errors import ConfigError

log = logging.getLogger("sits.local.supervisor")

ENGINE_INSTALL = "pip install llama-cpp-python==0.3.36"
STDERR_TAIL_LINES = 40


@dataclass(frozen=True, slots=True)
class WorkerLaunch:
    """Everything needed to (re)start one worker."""

    spec: LocalModelSpec
    model_path: Path
    host: str
    port: int

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def argv(self, python: str) -> list[str]:
        return [
            python, "-m", "sits.backends.local.worker",
            "--model-path", str(self.model_path),
            "--model-name", self.spec.name,
            "--host", self.host,
            "--port", str(self.port),
            "--prompt-format", self.spec.prompt_format,
            "--n-ctx", str(self.spec.n_ctx),
            "--threads", str(self.spec.n_threads),
        ]  # fmt: skip


@dataclass(slots=True)
class _Worker:
    """The live, changing side of one worker; only the pool touches it."""

    launch: WorkerLaunch
    process: asyncio.subprocess.Process | None = None
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_LINES))
    stderr_reader: asyncio.Task[None] | None = None
    watcher: asyncio.Task[None] | None = None
    restarts: int = 0

    def tail(self) -> str:
        return "\n".join(self.stderr_tail) or "(no output)"


class LocalWorkerPool:
    """Async owner of the local model workers. Use: `urls = await pool.start(...)`,
    then `await pool.stop()`; one start per pool."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        python: str = sys.executable,
        ready_timeout_s: float = 120.0,
        stop_timeout_s: float = 5.0,
        max_restarts: int = 5,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 15.0,
        poll_interval_s: float = 0.1,
    ) -> None:
        self._host = host
        self._python = python
        self._ready_timeout_s = ready_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._max_restarts = max_restarts
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._poll_interval_s = poll_interval_s
        self._workers: dict[str, _Worker] = {}
        self._session: aiohttp.ClientSession | None = None
        self._stopping = False

    @property
    def endpoints(self) -> Mapping[str, str]:
        """Model name -> OpenAI base URL of its worker."""
        return MappingProxyType({n: w.launch.base_url for n, w in self._workers.items()})

    def pid(self, name: str) -> int | None:
        """The worker's current process id (changes when it is restarted)."""
        process = self._workers[name].process
        return process.pid if process is not None else None

    async def start(self, specs: Sequence[LocalModelSpec], data_dir: Path) -> Mapping[str, str]:
        """Resolve every model's weights (ConfigError before anything is spawned),
        spawn the workers and return once all answer /health."""
        if self._workers or self._stopping:
            raise RuntimeError("a LocalWorkerPool starts once")
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ConfigError(f"local model names must be unique: {names}", param="name")
        launches = []
        for spec in specs:
            path = await asyncio.to_thread(resolve_gguf, spec, Path(data_dir))
            launches.append(WorkerLaunch(spec, path, self._host, _free_port(self._host)))
        if launches and importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError(f"local models need the llama.cpp engine: {ENGINE_INSTALL}")
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0))
        self._workers = {launch.spec.name: _Worker(launch) for launch in launches}
        try:
            await asyncio.gather(*(self._spawn_ready(w) for w in self._workers.values()))
        except BaseException:
            await self.stop()
            raise
        for worker in self._workers.values():
            worker.watcher = asyncio.create_task(
                self._watch(worker), name=f"sits-local-watch-{worker.launch.spec.name}"
            )
        return self.endpoints

    async def stop(self) -> None:
        """Terminate every worker (SIGTERM, then SIGKILL after stop_timeout_s) and wait."""
        self._stopping = True
        watchers = [w.watcher for w in self._workers.values() if w.watcher is not None]
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await asyncio.gather(*(self._terminate(w) for w in self._workers.values()))
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> LocalWorkerPool:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    # -- one worker ------------------------------------------------------------

    async def _spawn_ready(self, worker: _Worker) -> None:
        await self._spawn(worker)
        try:
            await self._await_healthy(worker)
        except BaseException:
            await self._terminate(worker)
            raise

    async def _spawn(self, worker: _Worker) -> None:
        worker.stderr_tail.clear()
        worker.process = await asyncio.create_subprocess_exec(
            *worker.launch.argv(self._python),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=_worker_environment(),
            # a terminal's Ctrl-C reaches the gateway, which then stops workers in order
            start_new_session=True,
        )
        worker.stderr_reader = asyncio.create_task(_collect_stderr(worker, worker.process))

    async def _await_healthy(self, worker: _Worker) -> None:
        assert worker.process is not None and self._session is not None
        name = worker.launch.spec.name
        url = f"http://{worker.launch.host}:{worker.launch.port}/health"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._ready_timeout_s
        while True:
            if worker.process.returncode is not None:
                if worker.stderr_reader is not None:
                    await worker.stderr_reader  # the tail is complete once the pipe closes
                raise ConfigError(
                    f"local model worker {name!r} exited with code {worker.process.returncode} "
                    f"before it was ready; its last output:\n{worker.tail()}",
                    code="local_worker_failed",
                )
            try:
                async with self._session.get(url) as response:
                    if response.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass  # not listening yet
            if loop.time() > deadline:
                raise ConfigError(
                    f"local model worker {name!r} was not ready after {self._ready_timeout_s:.0f}s; "
                    f"its last output:\n{worker.tail()}",
                    code="local_worker_timeout",
                )
            await asyncio.sleep(self._poll_interval_s)

    async def _watch(self, worker: _Worker) -> None:
        """Restart the worker whenever it exits, until the pool stops or it keeps failing."""
        name = worker.launch.spec.name
        failures = 0
        while not self._stopping:
            assert worker.process is not None
            code = await worker.process.wait()
            if self._stopping:
                return
            log.warning("local model worker %r exited with code %s; last output:\n%s",
                        name, code, worker.tail())
            while True:
                failures += 1
                if failures > self._max_restarts:
                    log.error("local model worker %r failed %d restarts; giving up",
                              name, self._max_restarts)
                    return
                delay = min(self._backoff_initial_s * 2 ** (failures - 1), self._backoff_max_s)
                await asyncio.sleep(delay)
                try:
                    await self._spawn_ready(worker)
                except ConfigError as error:
                    log.warning("restart %d of %r failed: %s", failures, name, error.message)
                    continue
                worker.restarts += 1
                failures = 0  # healthy again: the next crash gets the full budget
                log.info("local model worker %r restarted (pid %s)", name, worker.process.pid)
                break

    async def _terminate(self, worker: _Worker) -> None:
        process = worker.process
        if process is not None and process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), self._stop_timeout_s)
            except TimeoutError:
                log.warning("local model worker %r ignored SIGTERM; killing it",
                            worker.launch.spec.name)
                process.kill()
                await process.wait()
        if worker.stderr_reader is not None:
            await asyncio.gather(worker.stderr_reader, return_exceptions=True)


async def _collect_stderr(worker: _Worker, process: asyncio.subprocess.Process) -> None:
    assert process.stderr is not None
    name = worker.launch.spec.name
    while line := await process.stderr.readline():
        text = line.decode(errors="replace").rstrip()
        worker.stderr_tail.append(text)
        log.debug("[%s] %s", name, text)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _worker_environment() -> dict[str, str]:
    # The worker must import this very `sits`, also when it runs from a source
    # tree that is only on the parent's sys.path (pytest's pythonpath = src).
    env = dict(os.environ)
    source_root = str(Path(sits.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source_root, env.get("PYTHONPATH")) if p)
    return env
