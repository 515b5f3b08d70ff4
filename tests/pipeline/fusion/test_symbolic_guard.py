"""SymbolicGuard against real PDFs: correct drafts pass, planted errors are caught and explained."""

from __future__ import annotations

import pytest

from sits.pipeline.fusion.documents import PDF, Attachment, DocumentParser
from sits.pipeline.fusion.quantities import extract
from sits.pipeline.fusion.source_facts import SourceFacts
from sits.pipeline.fusion.symbolic_guard import SymbolicGuard, Verdict
from tests.pipeline.fusion.financial_reports import Report, correct_draft, make_report

REPORTS = [make_report(seed) for seed in (1, 2, 3)]


def facts_of(report: Report) -> SourceFacts:
    document = DocumentParser(max_pages=10).parse_now(Attachment("r.pdf", PDF, report.pdf, "file"))
    return SourceFacts.build("\n".join(document.pages), document.tables)


def check(report: Report, draft: str) -> Verdict:
    return SymbolicGuard().check(draft, facts_of(report))


def failing(verdict: Verdict) -> list[tuple[str, str]]:
    return [(f.text, f.status) for f in verdict.mismatches()]


@pytest.mark.parametrize("report", REPORTS, ids=lambda r: r.company)
def test_a_correct_draft_passes_every_check(report):
    verdict = check(report, correct_draft(report))
    assert failing(verdict) == []
    assert verdict.score == 1.0
    kinds = {f.kind for f in verdict.findings}
    assert {"currency", "percent", "date", "arithmetic"} <= kinds


@pytest.mark.parametrize("report", REPORTS, ids=lambda r: r.company)
def test_a_planted_wrong_number_is_caught_with_the_source_value(report):
    cost = report.row("Cost of sales").current
    draft = correct_draft(report).replace(f"${cost:,}", f"${cost + 7_000:,}")
    verdict = check(report, draft)
    assert failing(verdict) == [(f"${cost + 7_000:,}", "unsupported")]
    assert "nearest is" in verdict.mismatches()[0].detail and "cost of sales" in verdict.mismatches()[0].detail
    assert verdict.score is not None and verdict.score < 1.0


def test_a_value_from_another_row_is_misattributed():
    report = REPORTS[0]
    opex = report.row("Operating costs").current
    draft = f"Cost of sales was ${opex:,} in FY{report.year}."
    verdict = check(report, draft)
    assert failing(verdict) == [(f"${opex:,}", "misattributed")]
    assert "operating costs" in verdict.mismatches()[0].detail


def test_wrong_growth_rate_and_wrong_sum_are_wrong_arithmetic():
    report = REPORTS[1]
    revenue = report.row("Revenue")
    segments = report.segments
    draft = (f"Revenue changed by {abs(revenue.growth_pct) + 3:.1f}% from ${revenue.prior:,} to ${revenue.current:,}. "
             f"{segments[0][0]} (${segments[0][1]:,}) and {segments[1][0]} (${segments[1][1]:,}) total "
             f"${segments[0][1] + segments[1][1] + 5_000:,}.")
    verdict = check(report, draft)
    arithmetic = [(f.status, f.detail) for f in verdict.findings if f.kind == "arithmetic"]
    assert [s for s, _ in arithmetic] == ["wrong", "wrong"]
    assert f"change is {revenue.growth_pct:+.2f}%" in arithmetic[0][1]


@pytest.mark.parametrize(("sentence", "status"), [
    ("1,200 + 340 = 1,540", "correct"),
    ("1,200 + 340 = 1,450", "wrong"),
    ("450 / 1,500 = 30%", "correct"),
    ("The ratio of 300 to 200 is 1.5", "correct"),
    ("The ratio of 300 to 200 is 1.8", "wrong"),
    ("Services revenue of $250,000 was 25% of total revenue of $1,000,000.", "correct"),
    ("Services revenue of $250,000 was 20% of total revenue of $1,000,000.", "wrong"),
    ("Costs fell 10% from $500,000 to $450,000.", "correct"),
    ("Costs rose 10% from $500,000 to $450,000.", "wrong"),  # the direction is wrong
    ("The sum of 120, 130 and 250 is 500.", "correct"),
])
def test_stated_arithmetic(sentence, status):
    verdict = SymbolicGuard().check(sentence, SourceFacts.build(sentence))
    assert [f.status for f in verdict.findings if f.kind == "arithmetic"] == [status]


def test_dates_and_rounded_amounts():
    source = SourceFacts.build("Revenue for the year ended 2024-03-31 was $1,537,000. Costs were in thousands: "
                               "| Item | FY2024 |\n|---|---|\n| Costs | 812 |\n")
    verdict = SymbolicGuard().check(
        "For the year ended March 31, 2024 revenue was $1.5 million and costs $812,000; the audit was on "
        "June 3, 2024.", source)
    assert [(f.text, f.status) for f in verdict.findings] == [
        ("March 31, 2024", "supported"), ("$1.5 million", "supported"), ("$812,000", "supported"),
        ("June 3, 2024", "unsupported")]


def test_a_derived_amount_and_percentage_pass():
    report = REPORTS[2]
    revenue, cost = report.row("Revenue"), report.row("Cost of sales")
    gross = revenue.current - cost.current
    draft = f"Gross profit was ${gross:,}. Revenue went from ${revenue.prior:,} to ${revenue.current:,}."
    verdict = check(report, draft)
    assert failing(verdict) == []
    assert any(f.status == "derived" and f.text == f"${gross:,}" for f in verdict.findings)


@pytest.mark.parametrize(("text", "expected"), [
    ("$1.5m and 1,234.5 units", [("currency", 1.5e6, 5e4), ("number", 1234.5, 0.05)]),
    ("up 12.5% in Q3 2024", [("percent", 12.5, 0.05), ("date", 2024, 0.0)]),
    ("3 segments, COVID-19 and H2", []),
    ("EUR 40 million on 15 March 2025", [("currency", 40e6, 5e5), ("date", 2025, 0.0)]),
    ("FY2023 vs 2022", [("date", 2023, 0.0), ("year", 2022, 0.5)]),
])
def test_quantities_are_read_with_their_precision(text, expected):
    assert [(q.kind, q.value, q.tolerance) for q in extract(text)] == expected


def test_a_draft_citing_nothing_has_no_score():
    verdict = SymbolicGuard().check("The report looks fine.", SourceFacts.build("Revenue 1,000"))
    assert verdict.findings == () and verdict.score is None


def test_a_figure_from_another_years_column_is_misattributed():
    report = REPORTS[0]
    revenue = report.row("Revenue")
    wrong = check(report, f"The revenue in FY{report.prior_year} was ${revenue.current:,}.")
    assert failing(wrong) == [(f"${revenue.current:,}", "misattributed")]
    assert f"FY{report.year}" in wrong.mismatches()[0].detail
    right = check(report, f"Revenue was ${revenue.current:,} in FY{report.year}.")
    assert failing(right) == []
    both_years = check(report, f"Revenue was ${revenue.current:,} in FY{report.year} and "
                               f"${revenue.prior:,} in FY{report.prior_year}.")
    assert failing(both_years) == []  # two amounts, two years: no guess which goes with which
