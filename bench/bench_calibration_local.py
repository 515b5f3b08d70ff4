"""The packaged confidence map on drafts written by real models: the embedded SmolLM2-135M and
Gemma-3-270M answer questions about PDF reports through a running gateway's workflows.

    python bench/bench_calibration_local.py --reports 40   # writes bench/results/calibration-local-latest.{json,md}

Each request: model "workflow:<model>" = parse_document -> one generate branch -> SymbolicGuard,
sent with the official openai SDK, a real fpdf2 PDF attached. The question asks for one figure
(a table row in one fiscal year); a draft is correct when it states that figure (any written
form within its precision). Reported: accuracy, ECE of the raw guard score and of the packaged
calibrated confidence, the reliability bins, and the guard's verdicts on right and wrong drafts.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

import openai  # noqa: E402

from sits.app import Gateway  # noqa: E402
from sits.configuration.embedded_default import embedded_default_config  # noqa: E402
from sits.configuration.gateway import with_sections  # noqa: E402
from sits.pipeline.fusion.calibration import expected_calibration_error, reliability_curve  # noqa: E402
from sits.pipeline.fusion.quantities import extract  # noqa: E402
from sits.settings import Settings  # noqa: E402
from tests.pipeline.fusion.financial_reports import make_report  # noqa: E402

MODELS = ("smollm2-135m", "gemma3-270m")
METRICS = ("Revenue", "Cost of sales", "Operating costs", "Operating profit")


def workflow(model: str) -> dict[str, object]:
    return {"steps": [{"kind": "parse_document", "max_context_chars": 2500},
                      {"kind": "generate", "max_tokens": 40, "temperature": 0,
                       "instructions": "Answer from the document. Give the figure exactly as printed.",
                       "branches": [{"model": model}]},
                      {"kind": "verify"}]}


def states(draft: str, value: int) -> bool:
    return any(q.is_amount and abs(q.value - value) <= q.tolerance * 1.01 for q in extract(draft))


async def run(reports: int, data_dir: Path) -> list[dict[str, object]]:
    config = with_sections(embedded_default_config(), workflows={m: workflow(m) for m in MODELS})
    gateway = Gateway(Settings(host="127.0.0.1", port=0, data_dir=data_dir), config)
    await gateway.start()
    rows: list[dict[str, object]] = []
    rng = random.Random(7)
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{gateway.bound_port}/v1", api_key="x", timeout=300,
                                max_retries=0)
    try:
        for seed in range(reports):
            report = make_report(90_000 + seed)
            metric = rng.choice(METRICS)
            current = rng.random() < 0.5
            year = report.year if current else report.prior_year
            row = report.row(metric)
            expected = row.current if current else row.prior
            pdf = base64.b64encode(report.pdf).decode()
            question = f"What was {metric.lower()} in FY{year}?"
            for model in MODELS:
                t0 = time.perf_counter()
                answer = await client.chat.completions.create(model=f"workflow:{model}", messages=[
                    {"role": "user", "content": [  # the question after the document: easier for tiny models
                        {"type": "file", "file": {"filename": "report.pdf",
                                                  "file_data": f"data:application/pdf;base64,{pdf}"}},
                        {"type": "text", "text": question}]}])
                sits = answer.model_extra["sits"]
                draft = answer.choices[0].message.content or ""
                rows.append({"seed": seed, "model": model, "question": question, "expected": expected,
                             "draft": draft, "correct": states(draft, expected), "raw": sits["confidence_raw"],
                             "confidence": sits["confidence"], "verifier": sits["verifier"]["summary"],
                             "seconds": round(time.perf_counter() - t0, 2)})
                print(f"{seed:3d} {model:13s} ok={rows[-1]['correct']!s:5s} raw={sits['confidence_raw']:.2f} "
                      f"conf={sits['confidence']:.2f} {draft[:70]!r}", flush=True)
    finally:
        await client.close()
        await gateway.stop()
    return rows


def summarise(rows: list[dict[str, object]]) -> tuple[dict[str, object], str]:
    truth = [bool(r["correct"]) for r in rows]
    raw = [float(r["raw"]) for r in rows]  # type: ignore[arg-type]
    calibrated = [float(r["confidence"]) for r in rows]  # type: ignore[arg-type]
    by_model = {m: sum(1 for r in rows if r["model"] == m and r["correct"]) / max(1, sum(1 for r in rows
                                                                                       if r["model"] == m))
                for m in MODELS}
    verified = [r for r in rows if float(r["raw"]) == 1.0]  # type: ignore[arg-type]
    out = {
        "drafts": len(rows), "accuracy": round(sum(truth) / len(rows), 4),
        "accuracy_by_model": {m: round(a, 4) for m, a in by_model.items()},
        "ece_raw": round(expected_calibration_error(raw, truth), 4),
        "ece_packaged_map": round(expected_calibration_error(calibrated, truth), 4),
        "fully_verified": len(verified),
        "fully_verified_correct": sum(1 for r in verified if r["correct"]),
        "mean_seconds": round(sum(float(r["seconds"]) for r in rows) / len(rows), 2),  # type: ignore[arg-type]
        "reliability_packaged_map": [{"low": b.low, "count": b.count, "mean": round(b.mean_confidence, 4),
                                      "accuracy": round(b.accuracy, 4)} for b in reliability_curve(calibrated, truth)],
        "rows": rows,
    }
    md = [f"# Packaged calibration on real model drafts ({len(rows)} drafts, {', '.join(MODELS)})", "",
          f"accuracy {out['accuracy']} ({', '.join(f'{m} {a}' for m, a in out['accuracy_by_model'].items())}); "
          f"ECE raw {out['ece_raw']}, packaged map {out['ece_packaged_map']}; "
          f"fully verified drafts correct: {out['fully_verified_correct']}/{out['fully_verified']}; "
          f"mean {out['mean_seconds']} s per workflow", "",
          "| confidence bin | n | mean confidence | accuracy |", "|---|---|---|---|"]
    md += [f"| {b['low']:.1f}-{b['low'] + 0.1:.1f} | {b['count']} | {b['mean']:.3f} | {b['accuracy']:.3f} |"
           for b in out["reliability_packaged_map"]]  # type: ignore[union-attr]
    return out, "\n".join(md) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reports", type=int, default=40)
    parser.add_argument("--data-dir", default=str(ROOT / "bench" / "results" / "tmp" / "sits-data"))  # git-ignored
    args = parser.parse_args()
    rows = asyncio.run(run(args.reports, Path(args.data_dir)))
    out, md = summarise(rows)
    results = ROOT / "bench" / "results"
    (results / "calibration-local-latest.json").write_text(json.dumps(out, indent=2) + "\n")
    (results / "calibration-local-latest.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
