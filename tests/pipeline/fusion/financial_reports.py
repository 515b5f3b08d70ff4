"""Real PDF financial reports, generated with fpdf2: a narrative page and tables of revenue,
costs, profit and growth, with the ground truth kept next to the bytes.

Used by the tests and by bench/bench_documents.py and bench/bench_calibration.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date

from fpdf import FPDF

COMPANIES = ("Acme Corp", "Borealis Ltd", "Cobalt Systems", "Dunmore Foods", "Everlake Energy", "Fjord Analytics",
             "Granite Logistics", "Halcyon Health")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


@dataclass(frozen=True)
class Row:
    label: str
    prior: int
    current: int

    @property
    def growth_pct(self) -> float:
        return (self.current - self.prior) / self.prior * 100


@dataclass(frozen=True)
class Report:
    company: str
    prior_year: int
    year: int
    period_end: date
    rows: tuple[Row, ...]  # Revenue, Cost of sales, Operating costs, Operating profit
    segments: tuple[tuple[str, int], ...]  # current-year revenue by segment (sums to revenue)
    pdf: bytes
    quarters: tuple[tuple[str, ...], ...] = ()  # dense: a narrow quarterly table, wrapped labels, an empty cell

    def row(self, label: str) -> Row:
        return next(r for r in self.rows if r.label == label)

    def table_rows(self) -> list[list[str]]:
        """The main table as printed (header first): the ground truth for table extraction."""
        header = ["Metric", f"FY{self.prior_year}", f"FY{self.year}", "Change"]
        return [header, *([r.label, f"{r.prior:,}", f"{r.current:,}", f"{r.growth_pct:.1f}%"] for r in self.rows)]

    def segment_rows(self) -> list[list[str]]:
        revenue = self.row("Revenue").current
        return [["Segment", f"FY{self.year} revenue", "Share"],
                *([name, f"{value:,}", f"{value / revenue * 100:.1f}%"] for name, value in self.segments)]


def make_report(seed: int, *, user_password: str | None = None, extra_pages: int = 0, dense: bool = False) -> Report:
    rng = random.Random(seed)
    year = rng.choice([2022, 2023, 2024, 2025])
    revenue_prior = rng.randrange(800, 5000) * 1000
    revenue = int(revenue_prior * rng.uniform(0.85, 1.45)) // 1000 * 1000
    cost_prior, cost = int(revenue_prior * rng.uniform(0.4, 0.6)) // 1000 * 1000, int(revenue * rng.uniform(0.4, 0.6)) // 1000 * 1000
    opex_prior, opex = int(revenue_prior * rng.uniform(0.2, 0.3)) // 1000 * 1000, int(revenue * rng.uniform(0.2, 0.3)) // 1000 * 1000
    rows = (Row("Revenue", revenue_prior, revenue), Row("Cost of sales", cost_prior, cost),
            Row("Operating costs", opex_prior, opex),
            Row("Operating profit", revenue_prior - cost_prior - opex_prior, revenue - cost - opex))
    share = rng.uniform(0.3, 0.6)
    first = int(revenue * share) // 1000 * 1000
    second = int((revenue - first) * rng.uniform(0.3, 0.7)) // 1000 * 1000
    segments = (("Products", first), ("Services", second), ("Licensing", revenue - first - second))
    month = rng.choice([3, 6, 9, 12])
    period_end = date(year, month, {3: 31, 6: 30, 9: 30, 12: 31}[month])
    company = rng.choice(COMPANIES)
    quarters = _quarters(rng, revenue, cost, opex) if dense else ()
    report = Report(company, year - 1, year, period_end, rows, segments, b"", quarters)
    return Report(company, year - 1, year, period_end, rows, segments, _pdf(report, user_password, extra_pages),
                  quarters)


def _quarters(rng: random.Random, revenue: int, cost: int, opex: int) -> tuple[tuple[str, ...], ...]:
    def split(total: int) -> list[str]:
        parts = [rng.uniform(0.2, 0.3) for _ in range(3)]
        values = [int(total * p) // 1000 * 1000 for p in parts]
        return [f"{v:,}" for v in [*values, total - sum(values)]]

    return (("Quarter", "Q1", "Q2", "Q3", "Q4"), ("Revenue", *split(revenue)),
            ("Cost of sales and fulfilment", *split(cost)),
            ("Selling, general and administrative expenses", *split(opex)),
            ("One-off items", "", f"{rng.randrange(5, 90) * 1000:,}", "", ""))


def _pdf(report: Report, user_password: str | None, extra_pages: int) -> bytes:
    pdf = FPDF()
    pdf.set_creator("sits tests")
    if user_password is not None:
        pdf.set_encryption(owner_password="owner-" + user_password, user_password=user_password)
    pdf.add_page()
    pdf.set_font("Helvetica", style="B", size=16)
    pdf.cell(text=f"{report.company} - Annual Report FY{report.year}", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=10)
    revenue = report.row("Revenue")
    end = report.period_end
    pdf.multi_cell(0, 5, text=(
        f"For the fiscal year ended {MONTHS[end.month - 1]} {end.day}, {end.year}, {report.company} reported revenue "
        f"of ${revenue.current:,}, compared with ${revenue.prior:,} in FY{report.prior_year}. All amounts are in "
        f"US dollars. The board approved these statements on {end.year + 1}-02-15."), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)
    with pdf.table(col_widths=(50, 35, 35, 25), text_align=("LEFT", "RIGHT", "RIGHT", "RIGHT")) as table:
        for cells in report.table_rows():
            row = table.row()
            for cell in cells:
                row.cell(cell)
    pdf.ln(6)
    pdf.multi_cell(0, 5, text="Revenue by segment:", new_x="LMARGIN", new_y="NEXT")
    pdf.ln(2)
    with pdf.table(col_widths=(50, 40, 25), text_align=("LEFT", "RIGHT", "RIGHT")) as table:
        for cells in report.segment_rows():
            row = table.row()
            for cell in cells:
                row.cell(cell)
    if report.quarters:
        pdf.ln(6)
        pdf.multi_cell(0, 5, text="Quarterly figures:", new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=8)
        with pdf.table(col_widths=(30, 18, 18, 18, 18), text_align=("LEFT", "RIGHT", "RIGHT", "RIGHT", "RIGHT"),
                       width=102) as table:
            for cells in report.quarters:
                row = table.row()
                for cell in cells:
                    row.cell(cell)
    for n in range(extra_pages):
        pdf.add_page()
        pdf.multi_cell(0, 5, text=f"Notes to the accounts, page {n + 2}. " + "Management discussion. " * 40)
    return bytes(pdf.output())


def correct_draft(report: Report) -> str:
    """What a careful model would write: figures from the tables, arithmetic that holds."""
    revenue, cost, profit = report.row("Revenue"), report.row("Cost of sales"), report.row("Operating profit")
    products = report.segments[0]
    return (
        f"Key metrics for {report.company}, fiscal year ended {report.period_end.isoformat()}:\n"
        f"- Revenue {'grew' if revenue.growth_pct >= 0 else 'declined'} {abs(revenue.growth_pct):.1f}% from "
        f"${revenue.prior:,} to ${revenue.current:,}.\n"
        f"- Cost of sales was ${cost.current:,} in FY{report.year}.\n"
        f"- Operating profit was ${profit.current:,}.\n"
        f"- {products[0]} revenue of ${products[1]:,} was {products[1] / revenue.current * 100:.1f}% of "
        f"total revenue of ${revenue.current:,}.\n"
    )
