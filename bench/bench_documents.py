"""pypdf vs pdfplumber for the document-parsing step, measured on real PDFs (fpdf2 financial reports).

    python bench/bench_documents.py               # writes bench/results/documents-latest.{json,md}
    python bench/bench_documents.py --reports 20

Text: time per document and recall of the printed figures and words. Tables: time and cell
accuracy against the tables as printed, for pdfplumber's table finder and for the best a
pypdf-only parser can do (layout-mode text split into columns at runs of 2+ spaces).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

import pdfplumber  # noqa: E402
import pypdf  # noqa: E402

from tests.pipeline.fusion.financial_reports import Report, make_report  # noqa: E402

Tables = list[list[list[str]]]


def pypdf_text(data: bytes) -> str:
    return "\n".join(p.extract_text() or "" for p in pypdf.PdfReader(BytesIO(data)).pages)


def pdfplumber_text(data: bytes) -> str:
    with pdfplumber.open(BytesIO(data)) as pdf:
        return "\n".join(p.extract_text() or "" for p in pdf.pages)


def pdfplumber_tables(data: bytes) -> Tables:
    with pdfplumber.open(BytesIO(data)) as pdf:
        return [[[(c or "").strip() for c in row] for row in table] for page in pdf.pages
                for table in page.extract_tables()]


def pypdf_layout_tables(data: bytes) -> Tables:
    """Runs of lines that split into 3+ columns at 2+ spaces, as tables."""
    tables: Tables = []
    current: list[list[str]] = []
    for page in pypdf.PdfReader(BytesIO(data)).pages:
        for line in (page.extract_text(extraction_mode="layout") or "").splitlines():
            cells = [c.strip() for c in re.split(r"\s{2,}", line.strip()) if c.strip()]
            if len(cells) >= 3:
                current.append(cells)
            elif current:
                tables.append(current)
                current = []
    if current:
        tables.append(current)
    return tables


def truth_tables(report: Report) -> Tables:
    quarters = [[list(r) for r in report.quarters]] if report.quarters else []
    return [report.table_rows(), report.segment_rows(), *quarters]


def cell_accuracy(found: Tables, truth: Tables) -> float:
    """Share of true cells found in the right row and column; a true row is compared with the
    found row of the same first cell that matches it best (labels such as "Revenue" recur)."""
    rows: dict[str, list[list[str]]] = {}
    for table in found:
        for row in table:
            if row:
                rows.setdefault(squash(row[0]), []).append([squash(c) for c in row])
    hits = total = 0
    for table in truth:
        for row in table:
            total += len(row)
            hits += max((sum(1 for i, cell in enumerate(row) if i < len(got) and got[i] == cell)
                         for got in rows.get(squash(row[0]), [])), default=0)
    return hits / total


def squash(cell: str) -> str:
    return " ".join(cell.split())


def text_recall(text: str, report: Report) -> float:
    wanted = [c for t in truth_tables(report) for row in t for c in row if c and len(c) < 20] + [report.company]
    squashed = re.sub(r"\s+", " ", text)
    return sum(1 for w in wanted if w in squashed) / len(wanted)


def timed(fn: Callable[[bytes], object], data: bytes) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(data)
    return (time.perf_counter() - t0) * 1000, out


def measure(reports: list[Report]) -> dict[str, object]:
    results: dict[str, dict[str, list[float]]] = {}

    def record(name: str, ms: float, quality: float) -> None:
        entry = results.setdefault(name, {"ms": [], "quality": []})
        entry["ms"].append(ms)
        entry["quality"].append(quality)

    for report in reports:
        for name, fn in (("text: pypdf", pypdf_text), ("text: pdfplumber", pdfplumber_text)):
            ms, text = timed(fn, report.pdf)
            record(name, ms, text_recall(str(text), report))
        for name, fn in (("tables: pdfplumber", pdfplumber_tables), ("tables: pypdf layout split", pypdf_layout_tables)):
            ms, tables = timed(fn, report.pdf)
            record(name, ms, cell_accuracy(tables, truth_tables(report)))  # type: ignore[arg-type]
    return {name: {"ms_p50": round(statistics.median(v["ms"]), 2),
                   "ms_mean": round(statistics.fmean(v["ms"]), 2),
                   "quality_mean": round(statistics.fmean(v["quality"]), 4),
                   "quality_min": round(min(v["quality"]), 4), "n": len(v["ms"])}
            for name, v in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reports", type=int, default=40)
    parser.add_argument("--extra-pages", type=int, default=4, help="notes pages in the multi-page set")
    args = parser.parse_args()
    one_page = [make_report(seed) for seed in range(args.reports)]
    multi_page = [make_report(1000 + seed, extra_pages=args.extra_pages) for seed in range(args.reports // 2)]
    dense = [make_report(2000 + seed, dense=True) for seed in range(args.reports)]
    for r in one_page[:3]:  # warm imports and caches
        pypdf_text(r.pdf), pdfplumber_text(r.pdf), pdfplumber_tables(r.pdf), pypdf_layout_tables(r.pdf)
    out = {"python": platform.python_version(), "pypdf": pypdf.__version__, "pdfplumber": pdfplumber.__version__,
           "machine": platform.machine(), "reports": args.reports,
           "one_page": measure(one_page), f"{args.extra_pages + 1}_pages": measure(multi_page),
           "dense_tables": measure(dense)}
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "documents-latest.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [f"# Document parsing: pypdf {pypdf.__version__} vs pdfplumber {pdfplumber.__version__}", "",
             "quality: text = share of printed figures/words found; tables = share of cells in the right row and column",
             ""]
    for key in ("one_page", f"{args.extra_pages + 1}_pages", "dense_tables"):
        lines += [f"## {key.replace('_', ' ')} ({out[key]['text: pypdf']['n']} PDFs)", "",  # type: ignore[index]
                  "| extractor | p50 ms | mean ms | quality mean | quality min |", "|---|---|---|---|---|"]
        for name, m in out[key].items():  # type: ignore[union-attr]
            lines.append(f"| {name} | {m['ms_p50']} | {m['ms_mean']} | {m['quality_mean']} | {m['quality_min']} |")
        lines.append("")
    (results / "documents-latest.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
