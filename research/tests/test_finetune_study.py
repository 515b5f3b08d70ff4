from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import pytest

from research.finetune_study import (
    REFERENCE, TuneConfig, blend, candidate_scores, choose, cv_folds, fine_tune, frozen_scores, limited, run_cv,
)
from sits.understanding.quality_router.metrics import pair_metrics
from sits.understanding.quality_router.training import FOLDS
from tests.understanding.quality_router.synthetic_outcomes import two_clusters


def test_the_frozen_reference_is_never_chosen_and_the_best_mean_wins():
    cv = {REFERENCE: {"mean": 0.9}, "ft-heads-lr3e-05-e1": {"mean": 0.6}, "ft-heads-lr3e-05-e2": {"mean": 0.7}}
    assert choose(cv) == "ft-heads-lr3e-05-e2"


def test_blend_zero_is_the_tuned_ranking_and_a_half_averages_ranks():
    tuned, frozen = np.array([0.1, 0.9, 0.5]), np.array([3.0, 1.0, 2.0])
    assert blend(tuned, frozen, 0.0) is tuned
    assert blend(tuned, frozen, 0.5).tolist() == [0.5, 0.5, 0.5]  # opposite orders cancel
    names = candidate_scores({1: tuned, 2: tuned}, frozen, TuneConfig(lr=2e-5))
    assert set(names) == {"ft-heads-lr2e-05-e1", "ft-heads-lr2e-05-e1+frozen-a0.5",
                          "ft-heads-lr2e-05-e2", "ft-heads-lr2e-05-e2+frozen-a0.5"}


def test_folds_are_the_product_routers():
    folds = cv_folds(457, 0)
    assert sorted(np.bincount(folds).tolist()) == [91, 91, 91, 92, 92] and folds.max() == FOLDS - 1


def test_the_fine_tuning_budget_is_a_seeded_sample_of_the_fit_rows():
    rows = np.arange(10, 110)
    assert limited(rows, None, 0) is rows and limited(rows, 500, 0) is rows
    few = limited(rows, 30, 0)
    assert len(set(few.tolist())) == 30 and set(few.tolist()) <= set(rows.tolist()) and (np.diff(few) > 0).all()
    assert few.tolist() == limited(rows, 30, 0).tolist() != limited(rows, 30, 1).tolist()


def test_frozen_rankers_rank_the_hard_cluster_first():
    x, scores, group = two_clusters(200, 0, spread=0.5)
    fi, vi = np.arange(150), np.arange(150, 200)
    for ranker in ("logistic-l2=0.01", "knn-k40"):
        s = frozen_scores(x, scores, fi, vi, ranker)
        assert s[group[vi] == 1].mean() > s[group[vi] == 0].mean(), ranker
    with pytest.raises(ValueError):
        frozen_scores(x, scores, fi, vi, "mf-r16")


class _HashedWords:
    """A tiny trainable text encoder (bag of hashed words) standing in for MiniLM."""

    dim = 8

    def __init__(self) -> None:
        import torch

        torch.manual_seed(0)
        self.module = torch.nn.EmbeddingBag(64, self.dim, mode="mean")

    def encode(self, texts: Sequence[str]):
        import torch

        ids = [[zlib.crc32(w.encode()) % 64 for w in t.split()] for t in texts]
        offsets = torch.tensor([0] + [len(i) for i in ids[:-1]]).cumsum(0)
        return self.module(torch.tensor([w for i in ids for w in i]), offsets)


def _texts(group: np.ndarray, rng: np.random.Generator) -> list[str]:
    words = ["alpha", "beta", "gamma", "delta", "omega"]
    return [f"{'integral proof' if g else 'weather chat'} {rng.choice(words)} {rng.choice(words)}" for g in group]


@pytest.mark.parametrize("loss", ["heads", "gain"])
def test_fine_tuning_learns_which_prompts_the_weak_model_fails(loss):
    pytest.importorskip("torch")
    _, scores, group = two_clusters(300, 1)
    texts = _texts(group, np.random.default_rng(1))
    cfg = TuneConfig(loss=loss, lr=0.05, head_lr=0.05, epochs=3, batch=16)
    fit, held = np.arange(200), np.arange(200, 300)
    out = fine_tune(_HashedWords(), [texts[i] for i in fit], scores[fit], cfg, [texts[i] for i in held], [1, 3])
    assert set(out) == {1, 3}
    apgr = pair_metrics(scores[held, 0], scores[held, 1], out[3]).apgr
    oracle_cluster = pair_metrics(scores[held, 0], scores[held, 1], group[held].astype(float)).apgr
    assert apgr == pytest.approx(oracle_cluster, abs=0.02)  # the hard cluster first, as the cluster itself does


def test_cv_fine_tunes_on_training_rows_only_and_scores_every_epoch_and_blend():
    pytest.importorskip("torch")
    x, scores, group = two_clusters(240, 2, spread=0.5)
    texts = [f"{t} #{i}" for i, t in enumerate(_texts(group, np.random.default_rng(2)))]  # a text names its row
    train_idx = np.arange(0, 240, 2)  # the odd rows play the held-out half
    seen: set[int] = set()

    def make_encoder(cfg: TuneConfig) -> _HashedWords:
        enc = _HashedWords()
        inner = enc.encode

        def spy(batch: Sequence[str]):
            seen.update(texts.index(t) for t in batch)
            return inner(batch)

        enc.encode = spy  # type: ignore[method-assign]
        return enc

    cv = run_cv(texts, scores, train_idx, [TuneConfig(lr=0.05, head_lr=0.05, epochs=2)], make_encoder, x,
                "knn-k40", folds_run=2, log=lambda _: None)
    assert seen <= set(train_idx.tolist()) and seen
    assert set(cv) == {REFERENCE, "ft-heads-lr0.05-e1", "ft-heads-lr0.05-e1+frozen-a0.5",
                       "ft-heads-lr0.05-e2", "ft-heads-lr0.05-e2+frozen-a0.5"}
    assert all(len(v["per_fold"]) == 2 for v in cv.values())
    assert cv["ft-heads-lr0.05-e2"]["epochs"] == 2 and cv["ft-heads-lr0.05-e2+frozen-a0.5"]["blend"] == 0.5
    assert cv["ft-heads-lr0.05-e2"]["mean"] > 0.6


def test_merged_cv_results_choose_over_all_candidates_and_refuse_different_setups():
    from research.finetune_study import merge_cv

    base = {"data": "d.jsonl", "training_rows": 10, "folds_run": 5, "fit_limit": None,
            "frozen": {"features": "e5", "ranker": "knn-k100"}, "cv_seconds": 1}
    a = {**base, "cv_apgr": {REFERENCE: {"mean": 0.8}, "ft-heads-lr3e-05-e1": {"mean": 0.6}}}
    b = {**base, "cv_apgr": {REFERENCE: {"mean": 0.8}, "ft-gain-lr3e-05-e2": {"mean": 0.65}}}
    merged = merge_cv([a, b])
    assert merged["chosen"] == "ft-gain-lr3e-05-e2" and len(merged["cv_apgr"]) == 3
    with pytest.raises(ValueError, match="folds_run"):
        merge_cv([a, {**b, "folds_run": 1}])


def test_a_saved_epoch_scores_exactly_as_a_run_of_that_many_epochs(tmp_path):
    pytest.importorskip("torch")
    from research.finetune_study import fit_checkpoints, scores_from_checkpoint

    _, scores, group = two_clusters(120, 3)
    texts = _texts(group, np.random.default_rng(3))
    cfg = TuneConfig(lr=0.05, head_lr=0.05, epochs=3, batch=16)
    fit_checkpoints(_HashedWords(), texts[:80], scores[:80], cfg, tmp_path / "ck", log=lambda _: None)
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["config.json", "epoch1.pt", "epoch2.pt", "epoch3.pt"]
    direct = fine_tune(_HashedWords(), texts[:80], scores[:80], cfg, texts[80:], [2])[2]
    np.testing.assert_allclose(scores_from_checkpoint(_HashedWords(), tmp_path / "ck", 2, texts[80:]), direct)
    assert not np.allclose(scores_from_checkpoint(_HashedWords(), tmp_path / "ck", 1, texts[80:]), direct)
