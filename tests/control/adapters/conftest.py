from __future__ import annotations

from pathlib import Path

import pytest

from sits.backends.local.model_files import EMBEDDED_DEFAULT_MODELS, resolve_gguf
from sits.control.adapters.base_model import BaseModelSpec, load_base_spec
from tests.control.adapters.peft_factory import SMOLLM2_ID


@pytest.fixture(scope="session")
def smollm2_gguf(tmp_path_factory) -> Path:
    spec = next(s for s in EMBEDDED_DEFAULT_MODELS if s.name == "smollm2-135m")
    return resolve_gguf(spec, tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="session")
def smollm2(smollm2_gguf) -> BaseModelSpec:
    """SmolLM2-135M's real architecture, read from its GGUF metadata."""
    return load_base_spec(SMOLLM2_ID, smollm2_gguf)


@pytest.fixture(scope="session")
def smollm2_config(tmp_path_factory, smollm2) -> Path:
    """SmolLM2-135M's architecture as a Hugging Face config.json (values read from the real GGUF)."""
    import orjson

    directory = tmp_path_factory.mktemp("smollm2-config")
    (directory / "config.json").write_bytes(orjson.dumps({
        "model_type": smollm2.architecture, "hidden_size": smollm2.hidden_size,
        "intermediate_size": smollm2.intermediate_size, "num_hidden_layers": smollm2.num_layers,
        "num_attention_heads": smollm2.num_heads, "num_key_value_heads": smollm2.num_kv_heads,
        "head_dim": smollm2.head_dim, "vocab_size": smollm2.vocab_size}))
    return directory
