from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from sits.understanding.embedders import CharNgramEmbedder, ConcatEmbedder
from sits.understanding.embedding_cache import cached_embed


class CountingEmbedder:
    """Deterministic vectors from the text; counts the texts it embedded; can fail after a budget."""

    dim = 4

    def __init__(self, name: str = "counting", fail_after: int | None = None) -> None:
        self.name = name
        self.embedded: list[str] = []
        self._fail_after = fail_after

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._fail_after is not None and len(self.embedded) + len(texts) > self._fail_after:
            raise KeyboardInterrupt  # what stopping a long run by hand raises
        self.embedded.extend(texts)
        out = np.array([[len(t), t.count("a"), t.count("b"), 1.0] for t in texts], dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


TEXTS = [f"text {i} " + "ab" * (i % 7) for i in range(50)]


def test_second_run_reads_the_cache(tmp_path: Path) -> None:
    first = cached_embed(CountingEmbedder(), TEXTS, tmp_path, batch=8, chunk_rows=16)
    again = CountingEmbedder()
    np.testing.assert_array_equal(cached_embed(again, TEXTS, tmp_path, batch=8, chunk_rows=16), first)
    assert again.embedded == []
    assert not list((tmp_path / "counting" / "chunks").glob("*.npy"))  # joined into one file, chunks removed


def test_interrupted_run_resumes_at_the_first_missing_chunk(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        cached_embed(CountingEmbedder(fail_after=40), TEXTS, tmp_path, batch=8, chunk_rows=16)
    assert len(list((tmp_path / "counting" / "chunks").glob("*.npy"))) == 2  # rows 0-31 kept
    resumed = CountingEmbedder()
    arr = cached_embed(resumed, TEXTS, tmp_path, batch=8, chunk_rows=16)
    assert resumed.embedded == TEXTS[32:]
    np.testing.assert_allclose(arr, CountingEmbedder().embed(TEXTS))


def test_stale_and_corrupt_chunks_are_recomputed(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        cached_embed(CountingEmbedder(fail_after=40), TEXTS, tmp_path, batch=8, chunk_rows=16)
    stale, corrupt = sorted((tmp_path / "counting" / "chunks").glob("*.npy"))
    np.save(stale, np.zeros((3, 4), dtype=np.float32))  # wrong shape: another embedder's leftovers
    corrupt.write_bytes(b"not an array")
    resumed = CountingEmbedder()
    arr = cached_embed(resumed, TEXTS, tmp_path, batch=8, chunk_rows=16)
    assert len(resumed.embedded) == len(TEXTS)
    np.testing.assert_allclose(arr, CountingEmbedder().embed(TEXTS))


def test_stale_joined_file_is_recomputed(tmp_path: Path) -> None:
    cached_embed(CountingEmbedder(), TEXTS, tmp_path)
    (joined,) = (tmp_path / "counting").glob("*.npy")
    np.save(joined, np.zeros((2, 4), dtype=np.float32))
    again = CountingEmbedder()
    arr = cached_embed(again, TEXTS, tmp_path)
    assert len(again.embedded) == len(TEXTS) and arr.shape == (len(TEXTS), 4)


def test_joined_embedder_is_cached_part_by_part(tmp_path: Path) -> None:
    slow = CountingEmbedder("slow")
    cached_embed(slow, TEXTS, tmp_path)
    slow.embedded.clear()
    joined = ConcatEmbedder([slow, CharNgramEmbedder(dim=64)])
    arr = cached_embed(joined, TEXTS, tmp_path)
    assert slow.embedded == []  # its part came from the cache of the part alone
    np.testing.assert_allclose(arr, joined.embed(TEXTS), atol=1e-6)


def test_no_cache_dir_embeds_directly() -> None:
    e = CountingEmbedder()
    assert cached_embed(e, TEXTS, None, batch=8).shape == (50, 4)
    assert cached_embed(e, [], None).shape == (0, 4)


def test_last_block_is_the_question_a_few_shot_prompt_asks() -> None:
    from sits.understanding.embedders import last_block

    prompt = "Q: 1+1?\nA: 2\n\nQ: 2+2?\nA: 4\n \t\nQ: 3+3?\nA:"
    assert last_block(prompt) == "Q: 3+3?\nA:"
    assert last_block("one block\nwith lines") == "one block\nwith lines"
    assert last_block("question\n\n\n") == "question"
    assert last_block("") == ""


def test_at_last_embedder_embeds_the_last_block_and_caches_apart(tmp_path: Path) -> None:
    from sits.understanding.embedders import LastBlockEmbedder, make_embedder

    joined = make_embedder("charngram+charngram@last")
    assert isinstance(joined, ConcatEmbedder) and joined.name == "charngram+charngram@last"
    last = joined.parts[1]
    assert isinstance(last, LastBlockEmbedder) and last.dim == joined.parts[0].dim
    texts = ["shared examples\n\nfirst question", "shared examples\n\nsecond question"]
    np.testing.assert_allclose(last.embed(texts), CharNgramEmbedder().embed(["first question", "second question"]))
    cached_embed(joined, texts, tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"charngram", "charngram@last"}
    with pytest.raises(ValueError, match="@last"):
        make_embedder("bert@last")
