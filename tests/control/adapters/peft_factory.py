"""Real PEFT adapter directories (adapter_config.json + adapter_model.safetensors) written with numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
from safetensors.numpy import save_file

from sits.control.adapters.base_model import BaseModelSpec

SMOLLM2_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def write_lora(directory: Path, base: BaseModelSpec, *, r: int = 8, targets: tuple[str, ...] = ("q_proj", "v_proj"),
               dtype: type = np.float16, base_id: str = SMOLLM2_ID, layers: int | None = None,
               config_overrides: dict | None = None, shape_overrides: dict[str, tuple[int, ...]] | None = None,
               extra_tensors: dict[str, np.ndarray] | None = None) -> Path:
    """A LoRA adapter for `base`: lora_A (r, in) and lora_B (out, r) per targeted module and layer."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    shapes = base.module_shapes()
    tensors: dict[str, np.ndarray] = {}
    for layer in range(base.num_layers if layers is None else layers):
        for module in targets:
            fan_in, fan_out = shapes.get(module, (base.hidden_size, base.hidden_size))
            where = "self_attn" if module in ATTENTION else "mlp"
            prefix = f"base_model.model.model.layers.{layer}.{where}.{module}"
            tensors[f"{prefix}.lora_A.weight"] = rng.standard_normal((r, fan_in)).astype(dtype)
            tensors[f"{prefix}.lora_B.weight"] = np.zeros((fan_out, r), dtype=dtype)
    for name, shape in (shape_overrides or {}).items():
        tensors[name] = np.zeros(shape, dtype=dtype)
    tensors.update(extra_tensors or {})
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_id, "r": r,
              "lora_alpha": 2 * r, "lora_dropout": 0.05, "target_modules": list(targets), "bias": "none",
              "fan_in_fan_out": False, "modules_to_save": None, "use_rslora": False, "use_dora": False,
              "inference_mode": True, **(config_overrides or {})}
    (directory / "adapter_config.json").write_bytes(orjson.dumps(config))
    return directory


def write_ia3(directory: Path, base: BaseModelSpec, *, targets: tuple[str, ...] = ("k_proj", "v_proj", "down_proj"),
              feedforward: tuple[str, ...] = ("down_proj",)) -> Path:
    """An IA3 adapter: one scaling vector per module, (out, 1), or (1, in) for feed-forward modules."""
    directory.mkdir(parents=True, exist_ok=True)
    shapes = base.module_shapes()
    tensors = {}
    for layer in range(base.num_layers):
        for module in targets:
            fan_in, fan_out = shapes[module]
            where = "self_attn" if module in ATTENTION else "mlp"
            shape = (1, fan_in) if module in feedforward else (fan_out, 1)
            tensors[f"base_model.model.model.layers.{layer}.{where}.{module}.ia3_l"] = np.ones(shape, dtype=np.float32)
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    config = {"peft_type": "IA3", "task_type": "CAUSAL_LM", "base_model_name_or_path": SMOLLM2_ID,
              "target_modules": list(targets), "feedforward_modules": list(feedforward), "inference_mode": True}
    (directory / "adapter_config.json").write_bytes(orjson.dumps(config))
    return directory
