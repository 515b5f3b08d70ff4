"""Start, pin, wait for and stop the benchmark's child processes.

Every child runs in its own session (process group) so that stopping it also stops
whatever it forked (uvicorn workers, reloaders). `ProcessSet` stops all of them on
exit, error or signal: SIGTERM to the group, a bounded wait, then SIGKILL.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned(cmd: Sequence[str], cpus: str | None) -> list[str]:
    return (["taskset", "-c", cpus] if cpus else []) + list(cmd)


class ManagedProcess:
    def __init__(self, name: str, cmd: Sequence[str], log_path: Path, env: Mapping[str, str] | None, cwd: Path | None) -> None:
        self.name = name
        self.cmd = list(cmd)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            self.cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def stop(self, grace_s: float = 5.0) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # the group may outlive its leader (forked workers): always SIGKILL what is left
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


class ProcessSet:
    """Owns every child; `stop_all` is safe to call more than once."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[ManagedProcess] = []

    def start(
        self,
        name: str,
        cmd: Sequence[str],
        cpus: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> ManagedProcess:
        child = ManagedProcess(name, pinned(cmd, cpus), self.log_dir / f"{name}.log", env, cwd)
        self.children.append(child)
        return child

    def stop(self, child: ManagedProcess) -> None:
        child.stop()
        if child in self.children:
            self.children.remove(child)

    def stop_all(self) -> None:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()


def wait_for_line(child: ManagedProcess, prefix: str, timeout_s: float) -> str:
    """The first log line starting with `prefix`, polled until timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            for line in child.log_path.read_text(errors="replace").splitlines():
                if line.startswith(prefix):
                    return line
        except OSError:
            pass
        if not child.alive():
            raise RuntimeError(f"{child.name} exited with {child.proc.returncode}:\n{child.log_tail()}")
        time.sleep(0.05)
    raise TimeoutError(f"{child.name}: no '{prefix}' line within {timeout_s}s:\n{child.log_tail()}")


def wait_http_ok(child: ManagedProcess, url: str, timeout_s: float, interval_s: float = 0.2) -> float:
    """Poll GET url until 200; returns seconds waited. Fails early if the child dies."""
    start = time.monotonic()
    deadline = start + timeout_s
    last = ""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.monotonic() < deadline:
        if not child.alive():
            raise RuntimeError(f"{child.name} exited with {child.proc.returncode}:\n{child.log_tail()}")
        try:
            with opener.open(url, timeout=2) as resp:
                if resp.status == 200:
                    return time.monotonic() - start
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last = repr(exc)
        time.sleep(interval_s)
    raise TimeoutError(f"{child.name}: {url} not ready within {timeout_s}s (last: {last}):\n{child.log_tail()}")
