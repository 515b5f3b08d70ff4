"""The systems under test, all in front of one fast upstream.

- direct:  the upstream itself (the floor)
- sits:    `sits serve --backend bench-model=<upstream>/v1`, ready when GET /readyz is 200
- sits-tenants: the same with the key gate on (a tenant key with limits counted in Redis and budgets)
- litellm: LiteLLM's proxy from bench/.venv-litellm, one worker, no DB, no network
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from processes import ManagedProcess, ProcessSet, free_port, wait_for_line, wait_http_ok

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
PROJECT_PYTHON = REPO_DIR / ".venv" / "bin" / "python"
SITS_BIN = REPO_DIR / ".venv" / "bin" / "sits"
LITELLM_VENV = BENCH_DIR / ".venv-litellm"
MODEL = "bench-model"
START_ATTEMPTS = 3


@dataclass
class RunningTarget:
    name: str
    port: int
    process: ManagedProcess | None  # None for direct
    startup_s: float = 0.0
    version: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def chat_path(self) -> str:
        return "/v1/chat/completions"


def start_upstream(procs: ProcessSet, cpus: str | None) -> RunningTarget:
    python = str(PROJECT_PYTHON if PROJECT_PYTHON.exists() else sys.executable)
    child = procs.start("upstream", [python, str(BENCH_DIR / "fast_upstream.py"), "--port", "0"], cpus=cpus)
    port = int(wait_for_line(child, "PORT ", timeout_s=30).split()[1])
    wait_http_ok(child, f"http://127.0.0.1:{port}/health", timeout_s=10)
    return RunningTarget("direct", port, child)


def sits_command() -> list[str] | None:
    """The sits launcher if it answers --version, else None."""
    for cmd in ([str(SITS_BIN)], [str(PROJECT_PYTHON), "-m", "sits"]):
        if not Path(cmd[0]).exists():
            continue
        try:
            out = subprocess.run(cmd + ["--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0:
            return cmd
    return None


def sits_version(cmd: list[str]) -> str:
    out = subprocess.run(cmd + ["--version"], capture_output=True, text=True, timeout=30)
    return (out.stdout or out.stderr).strip()


# Admission's limit fixed above every bench's clients, for runs under valgrind (bench_instructions.py): there
# the gateway runs ~50x slower, and the adaptive limiter could queue the dearer requests.
PINNED_ADMISSION = "admission:\n  limiter: {type: fixed, limit: 64}\n"
TENANTS_SECRET = "bench-key-secret"  # what bench/sits_bench_keys.py hashes the bench key under
TENANTS_REDIS = "redis://127.0.0.1:6379/0"


def tenants_config(upstream_url: str, redis_url: str = TENANTS_REDIS, *, pinned_admission: bool = False,
                   max_batch: int | None = None, credits: bool = True) -> str:
    """The key gate on, as the benches price it (bench/sits_bench_keys.py supplies the key: rpm, tpm and
    concurrency limits counted in Redis, a key and a team budget reserved and settled), the model priced so
    every request's cost is computed. `pinned_admission`: admission's limit fixed at 64 (for valgrind
    runs, see bench_instructions.py); `max_batch`: `limits.max_batch` when not the default; `credits`: False for `limits.credit_s: null`."""
    admission = PINNED_ADMISSION if pinned_admission else ""
    batch = f", max_batch: {max_batch}" if max_batch is not None else ""
    if not credits:  # every request admitted on Redis (docs/limits-and-budgets.md, "Per-replica credits")
        batch += ", credit_s: null"
    return (f"{admission}tenants:\n  enabled: true\n"
            f'  limits: {{redis_url: "{redis_url}", key_prefix: "sits:bench:{os.getpid()}:"{batch}}}\n'
            f"models:\n  - name: {MODEL}\n    price: {{input: 3.0, cached_input: 0.3, output: 15.0}}\n"
            f'    endpoints: [{{url: "{upstream_url}"}}]\n')


def start_redis(procs: ProcessSet, cpus: str | None) -> str:
    """A redis-server of the bench's own, on `cpus` (the load's, like the upstream: the gateway under test
    keeps its core to itself, as it would with Redis on another machine); its URL."""
    server = shutil.which("redis-server")
    if server is None:
        raise RuntimeError("redis-server is not installed (the sits-tenants target counts limits in Redis)")
    port = free_port()
    child = procs.start("redis", [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                        cpus=cpus)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return f"redis://127.0.0.1:{port}/0"
        except OSError:
            if not child.alive() or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start") from None
            time.sleep(0.05)


def start_sits(procs: ProcessSet, upstream_port: int, cpus: str | None, work_dir: Path, gc_variant: bool = False,
               workers: int = 1, tenants: bool = False, tenants_max_batch: int | None = None,
               tenants_redis: str = TENANTS_REDIS) -> RunningTarget:
    """`gc_variant`: the diagnostic `sits-gc` target (bench/sits_gc_variant.py), same arguments;
    `workers`: `sits serve --workers N` (the `sits-2w` target: two gateway processes on one port);
    `tenants`: the `sits-tenants` target (bench/sits_bench_keys.py: the load's bearer key is a tenant key),
    admission as configured by default, as for the `sits` target, its limits counted in `tenants_redis`."""
    cmd = sits_command()
    if cmd is None:
        raise RuntimeError(f"sits is not runnable yet ({SITS_BIN} --version failed)")
    version = sits_version(cmd)
    name = "sits-gc" if gc_variant else "sits-tenants" if tenants else ("sits" if workers == 1 else f"sits-{workers}w")
    work_dir.mkdir(parents=True, exist_ok=True)
    serving = ["--backend", f"{MODEL}=http://127.0.0.1:{upstream_port}/v1"]
    env = None
    if gc_variant:
        cmd = [str(PROJECT_PYTHON), str(BENCH_DIR / "sits_gc_variant.py")]
    elif tenants:
        cmd = [str(PROJECT_PYTHON), str(BENCH_DIR / "sits_bench_keys.py")]
        config = work_dir / "tenants.yaml"
        config.write_text(tenants_config(f"http://127.0.0.1:{upstream_port}/v1", tenants_redis,
                                         max_batch=tenants_max_batch))
        serving = ["--config", str(config)]
        # the key every load generator here sends (`Bearer sk-bench`) is the bench tenant's key
        env = {**os.environ, "SITS_KEY_SECRET": TENANTS_SECRET, "SITS_BENCH_KEY": "sk-bench"}
    last: Exception | None = None
    for attempt in range(START_ATTEMPTS):
        port = free_port()
        child = procs.start(
            name if attempt == 0 else f"{name}-{attempt}",
            cmd + ["serve", *serving,
                   "--host", "127.0.0.1", "--port", str(port), *(["--workers", str(workers)] if workers > 1 else [])],
            cpus=cpus,
            cwd=work_dir,
            env=env,
        )
        try:
            waited = wait_http_ok(child, f"http://127.0.0.1:{port}/readyz", timeout_s=60)
            return RunningTarget(name, port, child, startup_s=waited, version=version)
        except (RuntimeError, TimeoutError) as exc:
            last = exc
            procs.stop(child)
    raise RuntimeError(f"{name} did not start in {START_ATTEMPTS} attempts: {last}")


def litellm_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            # never reach the network: bundled cost map, templates, presets; no feedback box
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOCAL_POLICY_TEMPLATES": "True",
            "LITELLM_LOCAL_BLOG_POSTS": "True",
            "LITELLM_LOCAL_AUTOROUTER_PRESETS": "True",
            "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
            "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
            "LITELLM_TELEMETRY": "False",
            "DISABLE_ADMIN_UI": "True",
            "NO_DOCS": "True",
            "NO_REDOC": "True",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            # no master key (no auth work on the hot path, as for the other targets); this
            # LiteLLM refuses to start without one unless told it is a local setup
            "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
            # minimal logging
            "LITELLM_LOG": "ERROR",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    )
    for var in ("DATABASE_URL", "LITELLM_MASTER_KEY", "REDIS_HOST", "REDIS_URL", "STORE_MODEL_IN_DB"):
        env.pop(var, None)
    return env


LITELLM_CONFIG = """\
model_list:
  - model_name: {model}
    litellm_params:
      model: openai/{model}
      api_base: http://127.0.0.1:{upstream_port}/v1
      api_key: sk-bench-dummy
litellm_settings:
  set_verbose: false
  json_logs: false
  turn_off_message_logging: true
  telemetry: false
  callbacks: []
  success_callback: []
  failure_callback: []
general_settings:
  disable_spend_logs: true
  disable_error_logs: true
  disable_adding_master_key_hash_to_db: true
  allow_requests_on_db_unavailable: true
"""


def litellm_version() -> str:
    out = subprocess.run(
        [str(LITELLM_VENV / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True, text=True, timeout=60,
    )
    return out.stdout.strip()


def start_python_floor(procs: ProcessSet, upstream_port: int, cpus: str | None) -> RunningTarget:
    """The bare Python proxy (python_proxy_floor.py, task-per-request shape): the ceiling of any gateway
    on uvloop + httptools here, so the run shows what SITS's own work costs next to it."""
    python = str(PROJECT_PYTHON if PROJECT_PYTHON.exists() else sys.executable)
    started = time.monotonic()
    child = procs.start("python-floor", [python, str(BENCH_DIR / "python_proxy_floor.py"), "--shape", "tasks",
                                         "--upstream", f"http://127.0.0.1:{upstream_port}/v1"], cpus=cpus)
    port = int(wait_for_line(child, "PORT ", timeout_s=30).split()[1])
    return RunningTarget("python-floor", port, child, startup_s=time.monotonic() - started, version="")


def start_litellm(procs: ProcessSet, upstream_port: int, cpus: str | None, work_dir: Path) -> RunningTarget:
    exe = LITELLM_VENV / "bin" / "litellm"
    if not exe.exists():
        raise RuntimeError(f"{exe} missing: python -m venv bench/.venv-litellm && "
                           "bench/.venv-litellm/bin/pip install -r bench/requirements-litellm.txt")
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "litellm-config.yaml"
    config.write_text(LITELLM_CONFIG.format(model=MODEL, upstream_port=upstream_port))
    last: Exception | None = None
    for attempt in range(START_ATTEMPTS):
        port = free_port()
        child = procs.start(
            "litellm" if attempt == 0 else f"litellm-{attempt}",
            [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"],
            cpus=cpus,
            env=litellm_env(),
            cwd=work_dir,
        )
        try:
            waited = wait_http_ok(child, f"http://127.0.0.1:{port}/health/liveliness", timeout_s=180, interval_s=0.5)
            return RunningTarget("litellm", port, child, startup_s=waited, version=litellm_version())
        except (RuntimeError, TimeoutError) as exc:
            last = exc
            procs.stop(child)
    raise RuntimeError(f"litellm did not start in {START_ATTEMPTS} attempts: {last}")
