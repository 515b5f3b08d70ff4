"""Fit and measure the confidence calibration of the SymbolicGuard score on a labelled set.

    python bench/bench_calibration.py            # writes bench/results/calibration-latest.{json,md}
    python bench/bench_calibration.py --write    # ... and src/sits/pipeline/fusion/default_calibration.py

The labelled set: real PDF reports (fpdf2), parsed by the gateway's own DocumentParser, and
drafts about them written from templates, each either correct or carrying one error of a known
kind: a wrong figure, a figure from the wrong row, a wrong growth rate, a wrong date, a wrong
sum, last year's figure given as this year's, or an error no number check can see (a wrong direction word with no figure, a wrong company
name). Label = the draft has no error. Raw score = the guard's share of checks passed (0.5 when
the draft cites nothing). Half the reports fit an isotonic map; the other half measure it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from sits.pipeline.fusion.calibration import (  # noqa: E402
    CalibrationMap,
    expected_calibration_error,
    fit_isotonic,
    reliability_curve,
)
from sits.pipeline.fusion.documents import PDF, Attachment, DocumentParser  # noqa: E402
from sits.pipeline.fusion.source_facts import SourceFacts  # noqa: E402
from sits.pipeline.fusion.symbolic_guard import SymbolicGuard  # noqa: E402
from tests.pipeline.fusion.financial_reports import COMPANIES, MONTHS, Report, make_report  # noqa: E402

Draft = tuple[str, str, bool]  # (kind, text, correct)


def sentences(report: Report, rng: random.Random) -> list[str]:
    """Correct sentences a draft may pick from, in several writing styles."""
    revenue, cost, opex, profit = (report.row(n) for n in ("Revenue", "Cost of sales", "Operating costs",
                                                          "Operating profit"))
    end = report.period_end
    up = "grew" if revenue.growth_pct >= 0 else "declined"
    seg_name, seg_value = report.segments[rng.randrange(3)]
    million = revenue.current / 1e6
    return [
        f"Revenue {up} {abs(revenue.growth_pct):.1f}% from ${revenue.prior:,} to ${revenue.current:,}.",
        f"Revenue was ${million:.1f} million in FY{report.year}.",
        f"Cost of sales was ${cost.current:,}{f' in FY{report.year}' if rng.random() < 0.5 else ''}.",
        f"Operating costs came to ${opex.current:,} (FY{report.prior_year}: ${opex.prior:,}).",
        f"Operating profit was ${profit.current:,}.",
        f"{seg_name} revenue of ${seg_value:,} was {seg_value / revenue.current * 100:.1f}% of total revenue of "
        f"${revenue.current:,}.",
        f"The fiscal year ended {MONTHS[end.month - 1]} {end.day}, {end.year}.",
        f"Gross profit was ${revenue.current - cost.current:,}.",
        f"{report.company} reported {'higher' if profit.current >= profit.prior else 'lower'} operating profit.",
    ] + [s for s in (  # true, but beyond what the guard derives (a margin, an average): false alarms, sometimes
        f"The operating margin was {profit.current / revenue.current * 100:.1f}%.",
        f"Revenue averaged ${revenue.current // 4:,} per quarter.",
    ) if rng.random() < 0.2]


def corrupt(report: Report, rng: random.Random, text: str) -> tuple[str, str] | None:
    """One error of a random kind planted in `text`; None when the kind does not apply to it."""
    revenue, cost, opex = (report.row(n) for n in ("Revenue", "Cost of sales", "Operating costs"))
    kind = rng.choice(["wrong-figure", "wrong-row", "wrong-year", "wrong-growth", "wrong-date", "wrong-sum",
                       "wrong-direction", "wrong-company"])
    if kind == "wrong-figure":
        old = rng.choice([r.current for r in report.rows])
        new = old + rng.choice([-1, 1]) * rng.randrange(1, 40) * 1000
        return (kind, text.replace(f"{old:,}", f"{new:,}", 1)) if f"{old:,}" in text else None
    if kind == "wrong-row" and f"{cost.current:,}" in text:
        return kind, text.replace(f"{cost.current:,}", f"{opex.current:,}", 1)
    if kind == "wrong-year" and f"${cost.current:,}." in text:  # last year's figure, said to be this year's
        return kind, text.replace(f"${cost.current:,}.", f"${cost.prior:,} in FY{report.year}.", 1)
    if kind == "wrong-growth" and f"{abs(revenue.growth_pct):.1f}%" in text:
        wrong = abs(revenue.growth_pct) + rng.choice([-1, 1]) * rng.uniform(1, 6)
        return kind, text.replace(f"{abs(revenue.growth_pct):.1f}%", f"{abs(wrong):.1f}%", 1)
    if kind == "wrong-date" and str(report.period_end.year) in text and "ended" in text:
        return kind, text.replace(f"{report.period_end.day}, ", f"{report.period_end.day % 28 + 1}, ", 1)
    if kind == "wrong-sum":
        a, b = report.segments[0][1], report.segments[1][1]
        return kind, text + f" Products and Services together total ${a + b + rng.randrange(1, 50) * 1000:,}."
    if kind == "wrong-direction" and ("higher" in text or "lower" in text):
        return kind, text.replace("higher", "@").replace("lower", "higher").replace("@", "lower")
    if kind == "wrong-company" and report.company in text:
        return kind, text.replace(report.company, rng.choice([c for c in COMPANIES if c != report.company]))
    return None


def drafts_for(report: Report, rng: random.Random, n: int) -> list[Draft]:
    out: list[Draft] = []
    while len(out) < n:
        picked = rng.sample(sentences(report, rng), rng.randrange(2, 6))
        text = " ".join(picked)
        if rng.random() < 0.45:
            out.append(("correct", text, True))
            continue
        planted = corrupt(report, rng, text)
        if planted is not None and planted[1] != text:
            out.append((planted[0], planted[1], False))
    return out


def score(guard: SymbolicGuard, facts: SourceFacts, text: str) -> float:
    verdict = guard.check(text, facts)
    return verdict.score if verdict.score is not None else 0.5


def compress(fitted: CalibrationMap, digits: int = 4) -> list[tuple[float, float]]:
    points: list[tuple[float, float]] = []
    for x, y in fitted.points():
        point = (round(x, digits), round(y, digits))
        if not points or point[0] > points[-1][0]:
            points.append(point)
    if points[0][0] > 0:
        points.insert(0, (0.0, points[0][1]))
    if points[-1][0] < 1:
        points.append((1.0, points[-1][1]))
    return points


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reports", type=int, default=160)
    parser.add_argument("--drafts", type=int, default=12, help="drafts per report")
    parser.add_argument("--write", action="store_true", help="write the fitted map into the package")
    args = parser.parse_args()
    rng = random.Random(20261203)
    guard, documents = SymbolicGuard(), DocumentParser(max_pages=10)
    rows: list[tuple[int, str, float, bool]] = []  # (report, kind, raw, correct)
    for seed in range(args.reports):
        report = make_report(50_000 + seed, dense=seed % 3 == 0)
        document = documents.parse_now(Attachment("r.pdf", PDF, report.pdf, "file"))
        facts = SourceFacts.build("\n".join(document.pages), document.tables)
        for kind, text, correct in drafts_for(report, rng, args.drafts):
            rows.append((seed, kind, score(guard, facts, text), correct))
    train = [r for r in rows if r[0] % 2 == 0]
    test = [r for r in rows if r[0] % 2 == 1]
    fitted = CalibrationMap.from_points(compress(fit_isotonic([r[2] for r in train], [r[3] for r in train])))
    raw_test, truth = [r[2] for r in test], [r[3] for r in test]
    calibrated = [fitted(x) for x in raw_test]
    caught = Counter(k for _, k, s, ok in rows if not ok and s < 1.0)
    planted = Counter(k for _, k, _, ok in rows if not ok)
    false_alarms = sum(1 for _, _, s, ok in rows if ok and s < 1.0)
    correct_total = sum(1 for r in rows if r[3])
    out = {
        "drafts": len(rows), "reports": args.reports, "train": len(train), "test": len(test),
        "correct_share": round(correct_total / len(rows), 4),
        "ece_raw": round(expected_calibration_error(raw_test, truth), 4),
        "ece_calibrated": round(expected_calibration_error(calibrated, truth), 4),
        "detected_by_kind": {k: f"{caught[k]}/{planted[k]}" for k in sorted(planted)},
        "false_alarms": f"{false_alarms}/{correct_total}",
        "reliability_raw": [_bin(b) for b in reliability_curve(raw_test, truth)],
        "reliability_calibrated": [_bin(b) for b in reliability_curve(calibrated, truth)],
        "points": fitted.points(),
    }
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "calibration-latest.json").write_text(json.dumps(out, indent=2) + "\n")
    md = [f"# Confidence calibration ({len(rows)} drafts on {args.reports} PDF reports; "
          f"fit on {len(train)}, measured on {len(test)})", "",
          f"ECE raw score: {out['ece_raw']}; ECE calibrated: {out['ece_calibrated']}", "",
          "| confidence bin | n | mean raw | accuracy | n | mean calibrated | accuracy |", "|---|---|---|---|---|---|---|"]
    raw_bins = {b["low"]: b for b in out["reliability_raw"]}
    cal_bins = {b["low"]: b for b in out["reliability_calibrated"]}
    for low in sorted(set(raw_bins) | set(cal_bins)):
        r, c = raw_bins.get(low), cal_bins.get(low)
        md.append(f"| {low:.1f}-{low + 0.1:.1f} | " + (f"{r['count']} | {r['mean']:.3f} | {r['accuracy']:.3f}" if r else
                                                        " | | ") + " | " +
                  (f"{c['count']} | {c['mean']:.3f} | {c['accuracy']:.3f}" if c else " | | ") + " |")
    md += ["", "detected (guard score < 1) by planted error: " +
           ", ".join(f"{k} {v}" for k, v in out["detected_by_kind"].items()),
           f"false alarms on correct drafts: {out['false_alarms']}", ""]
    (results / "calibration-latest.md").write_text("\n".join(md))
    print("\n".join(md))
    if args.write:
        target = ROOT / "src" / "sits" / "pipeline" / "fusion" / "default_calibration.py"
        points = ",\n    ".join(f"({x}, {y})" for x, y in fitted.points())
        target.write_text(
            '"""The packaged calibration map (raw SymbolicGuard score -> probability the answer is right).\n\n'
            'Written by bench/bench_calibration.py; see docs/workflows.md for the data and the fit."""\n\n'
            "from sits.pipeline.fusion.calibration import CalibrationMap\n\n"
            f"POINTS: tuple[tuple[float, float], ...] = (\n    {points},\n)\n\n\n"
            "def default_calibration() -> CalibrationMap:\n    return CalibrationMap.from_points(POINTS)\n")
        print(f"wrote {target}")


def _bin(b: object) -> dict[str, float]:
    return {"low": b.low, "high": b.high, "count": b.count, "mean": round(b.mean_confidence, 4),  # type: ignore[attr-defined]
            "accuracy": round(b.accuracy, 4)}  # type: ignore[attr-defined]

if __name__ == "__main__":
    main()
