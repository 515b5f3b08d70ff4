"""Exact token counts: the family's own tokenizer run over the text.

`tokenizer.json` families run through the `tokenizers` library (the same Rust code the
serving engines use). GGUF families run through llama.cpp's own tokenizer (llama-cpp-python,
vocab only: no weights are loaded) when it is installed; otherwise they have no exact counter
and callers keep their estimate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from sits.errors import ConfigError
from sits.understanding.tokenizers.vocabulary import tokenizer_json_path


class TokenCounter(Protocol):
    family: str

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without special tokens (BOS) added."""
        ...

    def count(self, text: str) -> int:
        ...


class HfTokenCounter:
    """A Hugging Face `tokenizers` tokenizer. Thread-safe; encoding releases the GIL."""

    def __init__(self, family: str, path: Path) -> None:
        from tokenizers import Tokenizer

        self.family = family
        try:
            self._tokenizer = Tokenizer.from_file(str(tokenizer_json_path(path)))
        except Exception as exc:  # the Rust side raises a bare Exception for a malformed file
            raise ConfigError(f"tokenizer {family!r}: cannot load {path}: {exc}", param="tokenizer") from None

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=False)


class GgufTokenCounter:
    """llama.cpp's tokenizer for a GGUF file (vocab_only: the weights stay on disk)."""

    def __init__(self, family: str, path: Path) -> None:
        from llama_cpp import Llama

        self.family = family
        try:
            self._llama = Llama(model_path=str(path), vocab_only=True, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            raise ConfigError(f"tokenizer {family!r}: llama.cpp cannot load {path}: {exc}",
                              param="tokenizer") from None

    def encode(self, text: str) -> list[int]:
        return list(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self._llama.detokenize(ids).decode("utf-8", "replace")


def gguf_counter_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True
