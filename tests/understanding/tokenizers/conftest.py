"""The three real tokenizer families (Llama-3, Qwen3, DeepSeek-V3), loaded once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from sits.backends.local.model_files import EMBEDDED_DEFAULT_MODELS, resolve_gguf
from sits.understanding.tokenizers.catalog import TokenizerCatalog, TokenizerSource
from tests.conftest import tokenizer_dir

FAMILIES = ("llama3", "qwen3", "deepseek_v3")


@pytest.fixture(scope="session")
def catalog(tmp_path_factory) -> TokenizerCatalog:
    catalog = TokenizerCatalog(tmp_path_factory.mktemp("tokenizer-cache"))
    for family in FAMILIES:
        catalog.load_one(TokenizerSource(family, tokenizer_dir(family)))
    return catalog


@pytest.fixture(scope="session")
def smollm2_gguf(tmp_path_factory) -> Path:
    spec = next(s for s in EMBEDDED_DEFAULT_MODELS if s.name == "smollm2-135m")
    return resolve_gguf(spec, tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="session")
def smollm2_catalog(tmp_path_factory, smollm2_gguf) -> TokenizerCatalog:
    """SmolLM2-135M's GGUF vocabulary and llama.cpp tokenizer, family "smollm2" (parsed once: seconds)."""
    catalog = TokenizerCatalog(tmp_path_factory.mktemp("gguf-cache"))
    catalog.load_one(TokenizerSource("smollm2", smollm2_gguf))
    return catalog
