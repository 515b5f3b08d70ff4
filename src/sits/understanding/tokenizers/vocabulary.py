"""A family's vocabulary as surface forms, loaded from a Hugging Face tokenizer.json or a GGUF file.

Loading reads the vocabulary only (token id -> bytes); encoding text is `counter.py`'s job.
Blocking (tens to hundreds of milliseconds): call from a thread in async code.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import orjson

from sits.errors import ConfigError
from sits.understanding.tokenizers.surface import byte_level_bytes, sentencepiece_bytes

# Markers that end an assistant turn in the common chat templates; a stop on any of them is an "end".
END_OF_TURN_MARKERS = ("<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<|endoftext|>", "<end_of_turn>",
                       "<｜end▁of▁sentence｜>", "</s>", "<eos>")
GGUF_CONTROL, GGUF_BYTE = 3, 6  # tokenizer.ggml.token_type values


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Token id -> surface bytes (None for ids the vocabulary leaves unused)."""

    family: str
    surfaces: tuple[bytes | None, ...]
    special: frozenset[int]
    end_ids: frozenset[int]  # end-of-sequence and end-of-turn tokens
    source: str  # the path it came from, for messages

    def __len__(self) -> int:
        return len(self.surfaces)


def tokenizer_json_path(directory_or_file: Path) -> Path:
    path = Path(directory_or_file)
    return path / "tokenizer.json" if path.is_dir() else path


def source_digest(path: Path) -> str:
    """What the disk cache is keyed by: the content of a tokenizer.json (and its config), or, for a
    GGUF file (hundreds of MB, immutable once written), its name, size and modification time."""
    digest = hashlib.sha256()
    path = Path(path)
    if path.suffix == ".gguf":
        stat = path.stat()
        digest.update(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
        return digest.hexdigest()
    path = tokenizer_json_path(path)
    for part in (path, path.with_name("tokenizer_config.json")):
        if part.is_file():
            digest.update(part.read_bytes())
    return digest.hexdigest()


def load_tokenizer_json(family: str, directory_or_file: Path) -> Vocabulary:
    """A vocabulary from a Hugging Face `tokenizer.json` (and `tokenizer_config.json` beside it, if any)."""
    path = tokenizer_json_path(directory_or_file)
    try:
        data = orjson.loads(path.read_bytes())
        model = data["model"]
        vocab: dict[str, int] = model["vocab"]
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ConfigError(f"tokenizer {family!r}: cannot read {path}: {exc}", param="tokenizer") from None
    if not isinstance(vocab, dict):
        raise ConfigError(f"tokenizer {family!r}: {path} has no BPE/WordPiece vocabulary (model.vocab is a "
                          f"{type(vocab).__name__})", param="tokenizer")
    byte_level = _is_byte_level(data.get("decoder")) or _is_byte_level(data.get("pre_tokenizer"))
    added = data.get("added_tokens") or []
    size = max([*vocab.values(), *(int(t["id"]) for t in added)], default=-1) + 1
    surfaces: list[bytes | None] = [None] * size
    for token, token_id in vocab.items():
        surfaces[token_id] = (byte_level_bytes(token) if byte_level else None) or sentencepiece_bytes(token)
    special = set()
    for token in added:  # added tokens are literal text, never byte-level encoded; they win over the vocab
        surfaces[int(token["id"])] = str(token["content"]).encode("utf-8")
        if token.get("special"):
            special.add(int(token["id"]))
    config_path = path.with_name("tokenizer_config.json")
    eos = _config_eos(config_path)
    return Vocabulary(family, tuple(surfaces), frozenset(special), _end_ids(surfaces, special, eos), str(path))


def load_gguf_vocabulary(family: str, path: Path) -> Vocabulary:
    """A vocabulary from a GGUF file's `tokenizer.ggml.*` metadata (gpt2 byte-level or llama SentencePiece)."""
    from gguf import GGUFReader  # imported here: only GGUF users pay for it

    try:
        reader = GGUFReader(str(path))
        tokens = _gguf_strings(reader, "tokenizer.ggml.tokens")
        kind = bytes(reader.fields["tokenizer.ggml.model"].parts[-1]).decode()
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"tokenizer {family!r}: cannot read GGUF vocabulary of {path}: {exc}",
                          param="tokenizer") from None
    types = _gguf_ints(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    surfaces: list[bytes | None] = []
    special = set()
    for i, (raw, token_type) in enumerate(zip(tokens, types)):
        text = raw.decode("utf-8", "replace")
        if token_type == GGUF_CONTROL:
            special.add(i)
            surfaces.append(raw)
        elif kind == "gpt2":
            surfaces.append(byte_level_bytes(text) or raw)
        else:
            surfaces.append(sentencepiece_bytes(text))
    eos_field = reader.fields.get("tokenizer.ggml.eos_token_id")
    eos_ids = {int(eos_field.parts[-1][0])} if eos_field is not None else set()
    ends = _end_ids(surfaces, special, None) | eos_ids
    return Vocabulary(family, tuple(surfaces), frozenset(special), frozenset(ends), str(path))


def _is_byte_level(component: object) -> bool:
    if not isinstance(component, dict):
        return False
    if component.get("type") == "ByteLevel":
        return True
    parts = component.get("decoders") or component.get("pretokenizers") or []
    return any(_is_byte_level(p) for p in parts)


def _config_eos(config_path: Path) -> str | None:
    try:
        config = orjson.loads(config_path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    eos = config.get("eos_token") if isinstance(config, dict) else None
    if isinstance(eos, dict):
        eos = eos.get("content")
    return eos if isinstance(eos, str) else None


def _end_ids(surfaces: list[bytes | None], special: set[int], eos: str | None) -> frozenset[int]:
    markers = {m.encode("utf-8") for m in (*END_OF_TURN_MARKERS, *([eos] if eos else []))}
    return frozenset(i for i in special if surfaces[i] in markers)


def _gguf_strings(reader: object, key: str) -> list[bytes]:
    field = reader.fields[key]  # type: ignore[attr-defined]
    return [bytes(field.parts[i]) for i in field.data]


def _gguf_ints(reader: object, key: str) -> list[int]:
    field = reader.fields.get(key)  # type: ignore[attr-defined]
    if field is None:
        return []
    return [int(field.parts[i][0]) for i in field.data]
