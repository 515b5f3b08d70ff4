"""An adapter's contract with its base model, checked before it may be activated.

Every violation names the field it is about (`r`, `target_modules`, `base_model_name_or_path`,
`dtype`, `tokenizer`, `tensors.<name>`, ...), and all of them are reported at once, so one
round trip tells the operator everything to fix. Tensor problems are grouped: one violation per
module, LoRA part and problem, with the layers it spans (a wrong rank is one line, not one per
tensor per layer); its field is the tensor's name, with `layers.*` when it spans several.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from sits.control.adapters.base_model import BaseModelSpec
from sits.control.adapters.peft_files import SUPPORTED_PEFT_TYPES, AdapterFiles, TensorInfo

# Declared dtypes, as operators write them, to safetensors' names.
DTYPES = {"float16": "F16", "fp16": "F16", "half": "F16", "bfloat16": "BF16", "bf16": "BF16",
          "float32": "F32", "fp32": "F32", "float": "F32"}
LORA_PARTS = ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "ia3_l")
EMBEDDING_MODULES = frozenset({"embed_tokens", "lm_head"})


@dataclass(frozen=True, slots=True)
class Violation:
    field: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


@dataclass(slots=True)
class _TensorGroup:
    """Tensors with the same problem in the same module and part, across layers."""

    field: str  # the first tensor's name, for a group of one
    label: str  # "q_proj.lora_A"
    problem: str  # "shape [8, 576] != expected [16, 576]"
    layers: set[int] = field(default_factory=set)
    count: int = 0

    def violation(self, pattern: str) -> Violation:
        where = ""
        if self.layers:
            where = f" in layer {_ranges(self.layers)}" if len(self.layers) == 1 else f" in layers {_ranges(self.layers)}"
        many = f" ({self.count} tensors)" if self.count > 1 else ""
        return Violation(f"tensors.{self.field if self.count == 1 else pattern}",
                         f"{self.label}: {self.problem}{where}{many}")


@dataclass(frozen=True, slots=True)
class EngineLimits:
    max_lora_rank: int = 16  # vLLM's default --max-lora-rank


def check_contract(adapter: AdapterFiles, base: BaseModelSpec, limits: EngineLimits,
                   declared_dtype: str | None = None, base_tokenizer: Path | None = None) -> list[Violation]:
    shapes = base.module_shapes()
    known = frozenset(shapes)
    out: list[Violation] = []
    if adapter.peft_type not in SUPPORTED_PEFT_TYPES:
        out.append(Violation("peft_type", f"{adapter.peft_type or '(missing)'} is not supported; "
                                          f"use one of {', '.join(SUPPORTED_PEFT_TYPES)}"))
        return out
    lora = adapter.peft_type == "LORA"
    rank = adapter.rank
    if lora:
        if rank is None or rank < 1:
            out.append(Violation("r", f"rank must be a positive integer, got {adapter.config.get('r')!r}"))
        elif rank > limits.max_lora_rank:
            out.append(Violation("r", f"rank {rank} exceeds the engine's max_lora_rank {limits.max_lora_rank}"))
    out += _base_id(adapter, base)
    targets = adapter.target_modules(known)
    unknown = sorted(targets - known)
    if not targets:
        out.append(Violation("target_modules", "no target modules declared"))
    if unknown:
        out.append(Violation("target_modules", f"{', '.join(unknown)} not in the {base.architecture} architecture "
                                               f"(it has {', '.join(sorted(known))})"))
    seen_modules, dtypes = set(), set()
    groups: dict[tuple[str, str, str], _TensorGroup] = {}  # by (name pattern, label, problem)
    for tensor in adapter.tensors:
        dtypes.add(tensor.dtype)
        problem, module, label = _tensor_problem(tensor, base, shapes, rank if lora else None, adapter)
        if module:
            seen_modules.add(module)
        if problem:
            pattern, layer = _layer_pattern(tensor.name)
            group = groups.setdefault((pattern, label, problem), _TensorGroup(tensor.name, label, problem))
            group.count += 1
            if layer is not None:
                group.layers.add(layer)
    # Ordered by name, then by first layer: the same report whatever order the file stores tensors in.
    ordered = sorted(groups.items(), key=lambda kv: (kv[0][0], min(kv[1].layers, default=-1), kv[0][2]))
    out += [group.violation(pattern) for (pattern, _, _), group in ordered]
    for module in sorted((targets & known) - seen_modules):
        out.append(Violation("target_modules", f"{module} is targeted but the weights carry no tensor for it"))
    if not adapter.tensors:
        out.append(Violation("tensors", "adapter_model.safetensors holds no tensors"))
    out += _dtype(dtypes, declared_dtype, adapter)
    if (targets | adapter.modules_to_save | seen_modules) & EMBEDDING_MODULES:
        out += _tokenizer(adapter.directory, base, base_tokenizer)
    return out


def _base_id(adapter: AdapterFiles, base: BaseModelSpec) -> list[Violation]:
    named = adapter.base_model_id
    if named is None:
        return [Violation("base_model_name_or_path", "adapter_config.json does not name its base model")]
    if _same_model(named, base.model_id):
        return []
    return [Violation("base_model_name_or_path", f"adapter was trained on {named!r}, not on {base.model_id!r}")]


def _same_model(a: str, b: str) -> bool:
    """Hub ids compare case-insensitively; a local path matches a hub id by its last component."""
    a, b = a.rstrip("/").lower(), b.rstrip("/").lower()
    if a == b:
        return True
    local = a.startswith(("/", "./", "../", "~")) or b.startswith(("/", "./", "../", "~"))
    return local and a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1]


def _tensor_problem(tensor: TensorInfo, base: BaseModelSpec, shapes: dict[str, tuple[int, int]], rank: int | None,
                    adapter: AdapterFiles) -> tuple[str | None, str | None, str]:
    """(problem, module it adapts, label "module.part"); the problem says nothing layer-specific,
    so the same problem in every layer groups into one violation."""
    parts = tensor.name.split(".")
    kind = next((p for p in parts if p in LORA_PARTS), None)
    if kind is None:  # a fully trained module (modules_to_save): same shape as the base's own
        module = parts[-2] if parts[-1] == "weight" and len(parts) > 1 else parts[-1]
        if module not in EMBEDDING_MODULES:
            return "not an adapter tensor of a known module", None, module
        expected = (base.vocab_size, base.hidden_size)
        return (None if tensor.shape == expected else _shape_problem(tensor, expected)), module, module
    index = parts.index(kind)
    module = parts[index - 1] if index else ""
    label = f"{module}.{kind}"
    if module not in shapes:
        return f"module {module!r} is not in the {base.architecture} architecture", None, label
    if "layers" in parts:
        layer_at = parts.index("layers") + 1
        layer = int(parts[layer_at]) if layer_at < len(parts) and parts[layer_at].isdigit() else -1
        if not 0 <= layer < base.num_layers:
            return f"no such layer (the base has {base.num_layers}, numbered from 0)", module, label
    fan_in, fan_out = shapes[module]
    r = rank if rank is not None else 0
    if kind == "ia3_l":
        feedforward = module in _as_set(adapter.config.get("feedforward_modules"))
        expected = (1, fan_in) if feedforward else (fan_out, 1)
    elif kind == "lora_embedding_A":
        expected = (r, fan_in)  # (r, num_embeddings)
    elif kind == "lora_embedding_B":
        expected = (fan_out, r)  # (embedding_dim, r)
    elif adapter.config.get("fan_in_fan_out"):
        expected = (fan_in, r) if kind == "lora_A" else (r, fan_out)
    else:
        expected = (r, fan_in) if kind == "lora_A" else (fan_out, r)
    if tensor.shape != expected:
        return _shape_problem(tensor, expected), module, label
    return None, module, label


def _shape_problem(tensor: TensorInfo, expected: tuple[int, int]) -> str:
    return f"shape {list(tensor.shape)} != expected {list(expected)}"


def _layer_pattern(name: str) -> tuple[str, int | None]:
    """The tensor name with its layer number as `*`, and that number (None outside numbered layers)."""
    parts = name.split(".")
    if "layers" in parts:
        at = parts.index("layers") + 1
        if at < len(parts) and parts[at].isdigit():
            layer = int(parts[at])
            parts[at] = "*"
            return ".".join(parts), layer
    return name, None


def _ranges(numbers: set[int]) -> str:
    """{0, 1, 2, 5, 7, 8} -> "0-2, 5, 7-8"."""
    ordered = sorted(numbers)
    spans: list[str] = []
    start = prev = ordered[0]
    for n in [*ordered[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(spans)


def _dtype(found: set[str], declared: str | None, adapter: AdapterFiles) -> list[Violation]:
    declared = declared or (adapter.config.get("torch_dtype") if isinstance(adapter.config.get("torch_dtype"), str)
                            else None)
    if declared is None:
        if len(found) > 1:
            return [Violation("dtype", f"tensors mix dtypes {', '.join(sorted(found))}")]
        return []
    want = DTYPES.get(declared.lower())
    if want is None:
        return [Violation("dtype", f"unknown dtype {declared!r}; use one of {', '.join(sorted(DTYPES))}")]
    wrong = sorted(found - {want})
    if wrong:
        return [Violation("dtype", f"declared {declared} ({want}) but tensors are {', '.join(wrong)}")]
    return []


def _tokenizer(directory: Path, base: BaseModelSpec, base_tokenizer: Path | None) -> list[Violation]:
    """Adapted embeddings are only meaningful with the base's vocabulary (or one the adapter ships)."""
    shipped = directory / "tokenizer.json"
    if not shipped.is_file():
        return []  # embeddings shaped for the base vocabulary (checked above) and the base tokenizer
    vocab = _vocab(shipped)
    if vocab is None:
        return [Violation("tokenizer", f"{shipped} is not a readable tokenizer.json")]
    size = max([*vocab.values(), -1]) + 1
    if size != base.vocab_size:
        return [Violation("tokenizer", f"the adapter's tokenizer has {size} tokens, the base model "
                                       f"{base.vocab_size}: embeddings would be misaligned")]
    if base_tokenizer is not None:
        reference = _vocab(base_tokenizer / "tokenizer.json" if base_tokenizer.is_dir() else base_tokenizer)
        if reference is not None and reference != vocab:
            differing = sum(1 for t, i in vocab.items() if reference.get(t) != i)
            return [Violation("tokenizer", f"{differing} tokens differ from the base tokenizer's ids")]
    return []


def _vocab(path: Path) -> dict[str, int] | None:
    try:
        data = orjson.loads(path.read_bytes())
        vocab = dict(data["model"]["vocab"])
        for token in data.get("added_tokens") or []:
            vocab[str(token["content"])] = int(token["id"])
        return vocab
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def _as_set(value: object) -> set[str]:
    if isinstance(value, str):
        return {value}
    return {str(v) for v in value} if isinstance(value, Iterable) else set()
