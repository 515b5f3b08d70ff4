"""The cross-vocabulary bridge on the real Llama-3, Qwen3 and DeepSeek-V3 vocabularies."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest

from sits.understanding.tokenizers.catalog import TokenizerCatalog, TokenizerSource, discover_sources
from sits.understanding.tokenizers.family_map import FamilyMapCache
from sits.understanding.tokenizers.surface import byte_level_bytes, normalised_key, sentencepiece_bytes, suid
from sits.understanding.tokenizers.vocabulary import source_digest
from tests.conftest import TOKENIZERS
from tests.understanding.tokenizers.conftest import FAMILIES


@pytest.mark.parametrize(("token", "expected"), [
    ("Ġhello", b" hello"), ("hello", b"hello"), ("Ċ", b"\n"), ("ĠĠ", b"  "), ("Ã©", "é".encode()),
])
def test_byte_level_tokens_decode_to_their_bytes(token, expected):
    assert byte_level_bytes(token) == expected


@pytest.mark.parametrize(("token", "expected"), [("▁hello", b" hello"), ("<0x0A>", b"\n"), ("<0xZZ>", b"<0xZZ>")])
def test_sentencepiece_tokens_decode_to_their_bytes(token, expected):
    assert sentencepiece_bytes(token) == expected


def test_composed_and_decomposed_text_are_one_unit_but_special_tokens_are_not_text():
    composed, decomposed = "é".encode(), unicodedata.normalize("NFD", "é").encode()
    assert composed != decomposed
    assert suid(normalised_key(composed)) == suid(normalised_key(decomposed))
    assert suid(normalised_key(b"<|im_end|>", special=True)) != suid(normalised_key(b"<|im_end|>"))
    assert normalised_key(b"\xe4\xbd").startswith("b:")  # half a CJK character stays raw bytes


def test_every_family_maps_every_token(catalog):
    for family in FAMILIES:
        fm = catalog.bridge.family(family)
        assert fm is not None
        assert np.count_nonzero(fm.suids) == len(fm)  # these vocabularies have no holes
        assert len(fm.sorted_suids) <= len(fm)


@pytest.mark.parametrize("source", FAMILIES)
@pytest.mark.parametrize("target", FAMILIES)
def test_translated_ids_decode_to_the_same_text(catalog, source, target):
    text = "The quick brown fox jumps over the lazy dog. 1234 ünïcödé 你好, 世界!"
    src, dst = catalog.counters[source], catalog.counters[target]
    ids = src.encode(text)
    translated = [catalog.bridge.translate_id(source, target, i) for i in ids]
    assert sum(t is not None for t in translated) >= len(ids) // 2
    for token_id, mapped in zip(ids, translated):
        if mapped is not None:
            assert unicodedata.normalize("NFC", dst.decode([mapped])) == unicodedata.normalize("NFC", src.decode([token_id]))


def test_the_same_word_maps_to_the_targets_own_token(catalog):
    llama, qwen = catalog.counters["llama3"], catalog.counters["qwen3"]
    for word in (" quick", " brown", "Hello", " the"):
        (source_id,), (target_id,) = llama.encode(word), qwen.encode(word)
        assert catalog.bridge.translate_id("llama3", "qwen3", source_id) == target_id


def test_coverage_is_a_share_and_asymmetric(catalog):
    table = {(c.source, c.target): c for c in catalog.bridge.coverage_table()}
    assert len(table) == 6
    for c in table.values():
        assert 0.0 < c.share < 1.0 and c.tokens == len(catalog.bridge.family(c.source))
    # Llama-3 and Qwen share most of their BPE ancestry; DeepSeek-V3's vocabulary is its own.
    assert table["llama3", "qwen3"].share > 0.8 > table["llama3", "deepseek_v3"].share
    assert table["llama3", "qwen3"].exact == pytest.approx(table["qwen3", "llama3"].exact, rel=0.01)


def test_special_tokens_map_only_to_identical_special_tokens(catalog):
    llama = catalog.bridge.family("llama3")
    eot = next(i for i in llama.end_ids if llama.surfaces[i] == b"<|eot_id|>")
    assert catalog.bridge.translate_id("llama3", "qwen3", eot) is None
    assert catalog.bridge.translate_id("llama3", "llama3", eot) == eot


def test_out_of_range_ids_have_no_counterpart(catalog):
    assert catalog.bridge.translate_id("llama3", "qwen3", 10**9) is None
    assert catalog.bridge.translate_id("llama3", "qwen3", -1) is None


def test_maps_come_back_from_the_disk_cache_identical(catalog, tmp_path):
    cold = TokenizerCatalog(tmp_path)
    first = cold.load_one(TokenizerSource("qwen3", TOKENIZERS / "qwen3"))
    warm = TokenizerCatalog(tmp_path)
    second = warm.load_one(TokenizerSource("qwen3", TOKENIZERS / "qwen3"))
    assert (first.from_cache, second.from_cache) == (False, True)
    a, b = cold.bridge.family("qwen3"), warm.bridge.family("qwen3")
    assert np.array_equal(a.suids, b.suids) and a.surfaces == b.surfaces
    assert a.special == b.special and a.end_ids == b.end_ids
    assert np.array_equal(a.sorted_ids, b.sorted_ids)


def test_a_corrupt_cache_file_is_rebuilt(tmp_path):
    source = TokenizerSource("deepseek_v3", TOKENIZERS / "deepseek_v3")
    cache = FamilyMapCache(tmp_path)
    path = cache.path("deepseek_v3", source_digest(source.path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not an npz file")
    family_map, cached = cache.load_or_build("deepseek_v3", source_digest(source.path), source.load_vocabulary)
    assert not cached and len(family_map) > 128_000
    assert cache.load("deepseek_v3", source_digest(source.path)) is not None


def test_gguf_vocabulary_decodes_like_llama_cpp(smollm2_catalog, smollm2_gguf):
    from llama_cpp import Llama

    family = smollm2_catalog.bridge.family("smollm2")  # built by load_gguf_vocabulary
    llama = Llama(model_path=str(smollm2_gguf), vocab_only=True, verbose=False)
    assert family is not None and len(family) == llama.n_vocab() == 49152
    for token_id in range(200, len(family), 997):
        if token_id not in family.special:
            assert family.surfaces[token_id] == llama.detokenize([token_id]), token_id
    assert {family.surfaces[i] for i in family.end_ids} >= {b"<|im_end|>"}


def test_discovery_finds_tokenizer_directories_and_gguf_files(tmp_path, smollm2_gguf):
    (tmp_path / "llama3").symlink_to(TOKENIZERS / "llama3")
    (tmp_path / "smol.gguf").symlink_to(smollm2_gguf)
    (tmp_path / "cache").mkdir()
    (tmp_path / "empty").mkdir()
    found = {s.family: s.is_gguf for s in discover_sources(tmp_path)}
    assert found == {"llama3": False, "smol": True}
    assert discover_sources(tmp_path / "missing") == []


def test_a_broken_source_is_skipped_not_fatal(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "tokenizer.json").write_text("{not json")
    catalog = TokenizerCatalog(tmp_path / "cache")
    reports = catalog.load([*discover_sources(tmp_path), TokenizerSource("llama3", TOKENIZERS / "llama3")])
    assert [r.family for r in reports] == ["llama3"]
    assert catalog.family_for("m", "broken") is None and catalog.family_for("m", "llama3") == "llama3"
