"""A PEFT adapter directory as data: `adapter_config.json` and the tensor headers of
`adapter_model.safetensors` (names, shapes, dtypes; the weights themselves are never read)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from safetensors import SafetensorError, safe_open

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
SUPPORTED_PEFT_TYPES = ("LORA", "IA3")


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str  # safetensors' names: F16, BF16, F32, ...


@dataclass(frozen=True, slots=True)
class AdapterFiles:
    directory: Path
    config: dict[str, Any]
    tensors: tuple[TensorInfo, ...]

    @property
    def peft_type(self) -> str:
        return str(self.config.get("peft_type", "")).upper()

    @property
    def rank(self) -> int | None:
        r = self.config.get("r")
        return r if isinstance(r, int) and not isinstance(r, bool) else None

    @property
    def base_model_id(self) -> str | None:
        value = self.config.get("base_model_name_or_path")
        return value if isinstance(value, str) and value else None

    def target_modules(self, known: frozenset[str]) -> frozenset[str]:
        """The module names the config targets; a regex (PEFT allows one) is matched against `known`."""
        targets = self.config.get("target_modules")
        if isinstance(targets, str):
            if targets in known:
                return frozenset({targets})
            pattern = re.compile(targets)
            return frozenset(m for m in known if pattern.search(f"model.layers.0.self_attn.{m}")
                             or pattern.search(f"model.layers.0.mlp.{m}"))
        if isinstance(targets, list):
            return frozenset(str(t) for t in targets)
        return frozenset()

    @property
    def modules_to_save(self) -> frozenset[str]:
        value = self.config.get("modules_to_save")
        return frozenset(str(m) for m in value) if isinstance(value, list) else frozenset()


class AdapterFileError(Exception):
    """The directory is not a readable PEFT adapter; `field` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def read_adapter(directory: Path) -> AdapterFiles:
    directory = Path(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    if not directory.is_dir():
        raise AdapterFileError("path", f"{directory} is not a directory")
    try:
        config = orjson.loads(config_path.read_bytes())
    except OSError:
        raise AdapterFileError("path", f"{directory} has no {CONFIG_FILE}") from None
    except orjson.JSONDecodeError as exc:
        raise AdapterFileError(CONFIG_FILE, f"not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise AdapterFileError(CONFIG_FILE, "must be a JSON object")
    if not weights_path.is_file():
        raise AdapterFileError("path", f"{directory} has no {WEIGHTS_FILE}")
    try:
        with safe_open(str(weights_path), "numpy") as fh:
            tensors = tuple(TensorInfo(name, tuple(fh.get_slice(name).get_shape()), fh.get_slice(name).get_dtype())
                            for name in fh.keys())
    except (SafetensorError, OSError, ValueError) as exc:
        raise AdapterFileError(WEIGHTS_FILE, f"not a readable safetensors file: {exc}") from None
    return AdapterFiles(directory, config, tensors)
