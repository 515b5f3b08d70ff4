"""`sits intent ...` and `sits router ...`: argparse wiring only; the work lives in the modules it calls.

The lead adds `add_intent_commands(sub)` and `add_router_commands(sub)` to `sits.cli`.
Heavy imports (torch, numpy models) happen inside the handlers so `sits --help` stays fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from sits.errors import ConfigError

EMBEDDER_HELP = "minilm, e5, charngram, several joined by +, or cascade (default: the config's)"
MARGIN_HELP = "with --embedder cascade: escalate when the fast head's margin is below this"


def add_intent_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    intent = subparsers.add_parser("intent", help="intent classification: classify prompts, measure accuracy")
    sub = intent.add_subparsers(dest="intent_command", required=True)

    classify = sub.add_parser("classify", help="label and confidence the default domains give a prompt")
    classify.add_argument("text", nargs="?", help="the prompt (or use --file)")
    classify.add_argument("--file", type=Path, help="JSONL file; every row's 'prompt' is classified")
    classify.add_argument("--domains", type=Path, help="domains YAML (default: the packaged defaults)")
    classify.add_argument("--embedder", help=EMBEDDER_HELP)
    classify.add_argument("--min-margin", type=float, help=MARGIN_HELP)
    classify.add_argument("--json", action="store_true", help="one {label, confidence} object per prompt")
    classify.set_defaults(run=_intent_classify)

    ev = sub.add_parser("eval", help="accuracy and macro-F1 of a classifier built from --train on --test")
    ev.add_argument("--train", type=Path, help="JSONL rows {prompt, label}: the domains' examples "
                                               "(default: the packaged default domains)")
    ev.add_argument("--test", type=Path, required=True, help="JSONL rows {prompt, label}")
    ev.add_argument("--embedder", help=EMBEDDER_HELP)
    ev.add_argument("--min-margin", type=float, help=MARGIN_HELP)
    ev.add_argument("--json", action="store_true", help="print {accuracy, macro_f1, per_label, escalated?}")
    ev.set_defaults(run=_intent_eval)

    tune = sub.add_parser("tune", help="cross-validated sweep of the cascade's margin bar on training rows")
    tune.add_argument("--train", type=Path, help="JSONL rows {prompt, label} (default: the packaged default "
                                                 "domains' examples and descriptions)")
    tune.add_argument("--fast", default="charngram", help="the cascade's fast embedder (default charngram)")
    tune.add_argument("--accurate", default="e5", help="the cascade's accurate embedder (default e5)")
    tune.add_argument("--target", type=float, default=0.924,
                      help="choose the smallest bar whose cross-validated accuracy reaches this (default 0.924)")
    tune.add_argument("--json", action="store_true", help="print the sweep and the choice as JSON")
    tune.set_defaults(run=_intent_tune)


def add_router_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    router = subparsers.add_parser("router", help="learned quality router: train and evaluate")
    sub = router.add_subparsers(dest="router_command", required=True)

    train = sub.add_parser("train", help="fit a quality router on routing-outcome rows")
    train.add_argument("--data", type=Path, required=True, help="JSONL rows {prompt, scores, costs?}")
    train.add_argument("--out", type=Path, required=True, help="router directory to write")
    train.add_argument("--model-kind", choices=("auto", "knn", "logistic", "mf"), default="auto",
                       help="predictor; auto picks by validation APGR/quality (default)")
    # e5 measured better than MiniLM on both RouteLLM sets (docs/understanding.md) and needs no torch.
    train.add_argument("--embedder", default="e5", help="e5, minilm, charngram, each optionally NAME@last (the prompt's last blank-line block), or joined by + (default e5)")
    train.add_argument("--holdout", type=float, default=0.0,
                       help="fraction of rows kept out of training (seeded) for `router eval` (default 0)")
    train.add_argument("--seed", type=int, default=0)
    train.set_defaults(run=_router_train)

    ev = sub.add_parser("eval", help="APGR, CPT(50%%), CPT(80%%) and the quality-cost frontier vs baselines")
    ev.add_argument("--router", type=Path, required=True, help="router directory from `sits router train`")
    ev.add_argument("--data", type=Path, required=True, help="JSONL rows {prompt, scores, costs?} not used in training")
    ev.add_argument("--strong", help="strong model (default: the best mean score)")
    ev.add_argument("--weak", help="weak model (default: the worst mean score)")
    ev.add_argument("--plot", type=Path, help="write the quality-cost frontier as a PNG here")
    ev.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    ev.set_defaults(run=_router_eval)


def _cache_dir() -> Path:
    from sits.understanding.embedding_cache import cache_dir_from_env

    return cache_dir_from_env(os.environ)


def _read_rows(path: Path, need: tuple[str, ...]) -> list[dict[str, object]]:
    rows = []
    try:
        lines = path.read_text("utf-8").split("\n")  # not splitlines(): prompts may hold U+2028
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{n}: not JSON: {exc.msg}") from None
        missing = [k for k in need if k not in row]
        if missing:
            raise ConfigError(f"{path}:{n}: missing field {missing[0]!r}")
        rows.append(row)
    return rows


def _config(embedder: str | None, domains: Path | None = None, min_margin: float | None = None):
    from sits.understanding.settings import UnderstandingConfig

    data: dict[str, object] = {}
    if embedder:
        data["embedder"] = embedder
    if domains:
        data["domains_file"] = str(domains)
    if min_margin is not None:
        data["cascade"] = {"min_margin": min_margin}
    try:
        return UnderstandingConfig.model_validate(data)
    except ValueError as exc:
        raise ConfigError(f"bad option: {exc}") from None


def _intent_classify(args: argparse.Namespace) -> int:
    from sits.understanding.factory import build_intent_parts

    if (args.text is None) == (args.file is None):
        raise ConfigError("give either TEXT or --file")
    texts = [str(r["prompt"]) for r in _read_rows(args.file, ("prompt",))] if args.file else [args.text]
    parts = build_intent_parts(_config(args.embedder, args.domains, args.min_margin), cache_dir=_cache_dir())
    for text, guess in zip(texts, parts.classify_offline(texts, cache_dir=None)):
        if args.json:
            print(json.dumps({"label": guess.label, "confidence": round(guess.confidence, 4)}))
        else:
            print(f"{guess.label}\t{guess.confidence:.2f}\t{guess.source}")
    return 0


def _intent_eval(args: argparse.Namespace) -> int:
    from sits.understanding.domains import domains_from_examples
    from sits.understanding.factory import build_intent_parts
    from sits.understanding.intent_metrics import score_predictions

    test = _read_rows(args.test, ("prompt", "label"))
    domains = None
    if args.train:
        train = _read_rows(args.train, ("prompt", "label"))
        domains = domains_from_examples([(str(r["prompt"]), str(r["label"])) for r in train])
    parts = build_intent_parts(_config(args.embedder, None, args.min_margin), domains, cache_dir=_cache_dir())
    guesses = parts.classify_offline([str(r["prompt"]) for r in test], cache_dir=_cache_dir())
    report = score_predictions([str(r["label"]) for r in test], [g.label for g in guesses])
    out = report.as_json()
    cascade = parts.cascade
    escalated = sum(1 for g in guesses if cascade is not None and g.source == cascade.source(True))
    if cascade is not None:
        out["escalated"] = {"prompts": escalated, "share": escalated / len(test), "min_margin": cascade.min_margin}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"accuracy  {report.accuracy:.4f}   macro-F1  {report.macro_f1:.4f}   ({len(test)} prompts)")
    if cascade is not None:
        print(f"escalated {escalated} of {len(test)} prompts ({escalated / len(test):.1%}) "
              f"to {cascade.accurate.embedder_name} (min margin {cascade.min_margin})")
    print(f"{'label':<30}{'precision':>10}{'recall':>10}{'f1':>10}{'support':>9}")
    for label, s in report.per_label.items():
        print(f"{label:<30}{s.precision:>10.3f}{s.recall:>10.3f}{s.f1:>10.3f}{s.support:>9}")
    return 0


def _intent_tune(args: argparse.Namespace) -> int:
    from sits.understanding.cascade_tuning import cross_validated_sweep
    from sits.understanding.domains import load_domains

    cfg = _config("cascade")
    try:
        cfg.cascade.model_validate({"fast": args.fast, "accurate": args.accurate})
    except ValueError as exc:
        raise ConfigError(f"bad option: {exc}") from None
    if args.train:
        rows = [(str(r["prompt"]), str(r["label"])) for r in _read_rows(args.train, ("prompt", "label"))]
    else:
        rows = [(t, d.name) for d in load_domains(None)
                for t in (*d.examples, *((d.description,) if d.description else ()))]
    from sits.understanding.embedders import make_embedder

    sweep = cross_validated_sweep([t for t, _ in rows], [label for _, label in rows], make_embedder(args.fast),
                                  make_embedder(args.accurate), _cache_dir())
    chosen = sweep.choose(args.target)
    if args.json:
        print(json.dumps({**sweep.as_json(), "target": args.target,
                          "chosen": None if chosen is None else chosen.min_margin}))
        return 0
    print(f"{sweep.rows} rows, 5-fold x {sweep.seeds} seeds: {args.fast} {sweep.fast_accuracy:.4f}, "
          f"{args.accurate} {sweep.accurate_accuracy:.4f}")
    print(f"{'min_margin':>10}{'escalated':>11}{'accuracy':>10}{'kept fast acc':>15}")
    for p in sweep.points:
        print(f"{p.min_margin:>10.2f}{p.escalated:>11.3f}{p.accuracy:>10.4f}{p.kept_fast_accuracy:>15.4f}")
    print(f"chosen min_margin: {'none reaches the target' if chosen is None else chosen.min_margin} "
          f"(smallest bar with cross-validated accuracy >= {args.target})")
    return 0


def _router_train(args: argparse.Namespace) -> int:
    from sits.understanding.quality_router.training import train_router_cli

    if not 0.0 <= args.holdout < 1.0:
        raise ConfigError("--holdout must be in [0, 1)")
    return train_router_cli(args.data, args.out, args.model_kind, args.embedder, _cache_dir(), sys.stdout,
                            args.holdout, args.seed)


def _router_eval(args: argparse.Namespace) -> int:
    from sits.understanding.quality_router.evaluation import eval_router_cli

    return eval_router_cli(args.router, args.data, args.strong, args.weak, args.plot, args.json,
                           _cache_dir(), sys.stdout)
