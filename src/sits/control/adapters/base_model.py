"""What an adapter is checked against: the base model's architecture, from config.json or GGUF metadata.

Only decoder-only transformers with the Llama module layout (Llama, Mistral, Qwen2/3, Gemma,
SmolLM...) are described; their projection names are what PEFT adapters target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

from sits.errors import InvalidRequest

# model_type / general.architecture values that share the Llama module layout
LLAMA_LAYOUT = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text",
                          "smollm", "smollm3", "granite", "olmo2", "phi3"})


@dataclass(frozen=True, slots=True)
class BaseModelSpec:
    model_id: str  # e.g. "HuggingFaceTB/SmolLM2-135M-Instruct": what adapter configs name
    architecture: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    source: str

    def module_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each adaptable linear module, as PEFT names them."""
        q_out = self.num_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        return {
            "q_proj": (self.hidden_size, q_out),
            "k_proj": (self.hidden_size, kv_out),
            "v_proj": (self.hidden_size, kv_out),
            "o_proj": (q_out, self.hidden_size),
            "gate_proj": (self.hidden_size, self.intermediate_size),
            "up_proj": (self.hidden_size, self.intermediate_size),
            "down_proj": (self.intermediate_size, self.hidden_size),
            "lm_head": (self.hidden_size, self.vocab_size),
            "embed_tokens": (self.vocab_size, self.hidden_size),  # an embedding: (num_embeddings, dim)
        }


def load_base_spec(model_id: str, path: Path) -> BaseModelSpec:
    """From a Hugging Face `config.json` (or its directory) or a `.gguf` file. Blocking."""
    path = Path(path)
    if path.suffix == ".gguf":
        return _from_gguf(model_id, path)
    if path.is_dir():
        path = path / "config.json"
    try:
        config = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise InvalidRequest(f"cannot read the base model config {path}: {exc}", param="base.config") from None
    if not isinstance(config, dict):
        raise InvalidRequest(f"{path} is not a model config", param="base.config")
    config = config.get("text_config", config) if "hidden_size" not in config else config
    try:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return BaseModelSpec(
            model_id=model_id, architecture=str(config.get("model_type", "")),
            hidden_size=hidden, intermediate_size=int(config["intermediate_size"]),
            num_layers=int(config["num_hidden_layers"]), num_heads=heads,
            num_kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads), vocab_size=int(config["vocab_size"]),
            source=str(path),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidRequest(f"{path} lacks an architecture field: {exc}", param="base.config") from None


def _from_gguf(model_id: str, path: Path) -> BaseModelSpec:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except (OSError, ValueError) as exc:
        raise InvalidRequest(f"cannot read GGUF metadata of {path}: {exc}", param="base.config") from None

    def value(key: str) -> object:
        field = reader.fields.get(key)
        return None if field is None else field.contents()

    arch = str(value("general.architecture") or "")
    try:
        hidden = int(value(f"{arch}.embedding_length"))  # type: ignore[arg-type]
        heads = int(value(f"{arch}.attention.head_count"))  # type: ignore[arg-type]
        vocab = value(f"{arch}.vocab_size")
        if vocab is None:
            tokens = reader.fields["tokenizer.ggml.tokens"]
            vocab = len(tokens.data)
        head_dim = value(f"{arch}.attention.key_length") or value(f"{arch}.rope.dimension_count") or hidden // heads
        return BaseModelSpec(
            model_id=model_id, architecture=arch, hidden_size=hidden,
            intermediate_size=int(value(f"{arch}.feed_forward_length")),  # type: ignore[arg-type]
            num_layers=int(value(f"{arch}.block_count")),  # type: ignore[arg-type]
            num_heads=heads, num_kv_heads=int(value(f"{arch}.attention.head_count_kv") or heads),  # type: ignore[arg-type]
            head_dim=int(head_dim),  # type: ignore[arg-type]
            vocab_size=int(vocab),  # type: ignore[arg-type]
            source=str(path),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidRequest(f"GGUF {path} lacks architecture metadata ({exc})", param="base.config") from None
