"""What a source document states: every quantity, with the table row and column it sits in.

Built once per workflow run from the parsed documents and the client's own text (Markdown pipe
tables in that text count as tables too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sits.pipeline.fusion.documents import Table
from sits.pipeline.fusion.quantities import Quantity, extract

_PIPE_ROW = re.compile(r"^\s*\|(.+)\|\s*$")
_PIPE_RULE = re.compile(r"^[\s|:\-]+$")
_THOUSANDS = re.compile(r"in thousands|\(\s*[$€£]?\s*000s?\s*\)|[$€£]\s?000s?\b|'000", re.I)
_MILLIONS = re.compile(r"in millions|\(\s*[$€£]?\s*m(?:illions?)?\s*\)|[$€£]m\b", re.I)


@dataclass(frozen=True, slots=True)
class Cell:
    quantity: Quantity
    table: int  # 1-based
    row: int
    column: int
    row_label: str  # the row's first cell, lower-cased
    column_label: str  # the column's header cell

    def where(self) -> str:
        column = f", {self.column_label}" if self.column_label else ""
        return f"table {self.table}, {self.row_label or f'row {self.row + 1}'}{column}"


@dataclass(frozen=True, slots=True)
class SourceFacts:
    quantities: tuple[Quantity, ...]  # everything in the text, tables included
    cells: tuple[Cell, ...]
    row_labels: tuple[str, ...]  # longest first, for matching inside draft sentences
    scales: tuple[float, ...]  # 1, plus 1e3 / 1e6 when the source says its figures are in thousands / millions

    @classmethod
    def build(cls, text: str, tables: tuple[Table, ...] = ()) -> SourceFacts:
        all_tables = (*tables, *pipe_tables(text))
        cells = []
        for t, table in enumerate(all_tables, start=1):
            header = table.rows[0] if table.rows else ()
            for r, row in enumerate(table.rows):
                label = row[0].strip().lower() if r > 0 and row and not extract(row[0]) else ""
                for c, value in enumerate(row):
                    for q in extract(value):
                        column = header[c].strip() if r > 0 and c < len(header) else ""
                        cells.append(Cell(q, t, r, c, label, column))
        table_text = "\n".join(" ".join(row) for table in all_tables for row in table.rows)
        everything = text + "\n" + table_text
        scales = [1.0]
        if _THOUSANDS.search(everything):
            scales.append(1e3)
        if _MILLIONS.search(everything):
            scales.append(1e6)
        labels = sorted({c.row_label for c in cells if len(c.row_label) >= 3}, key=len, reverse=True)
        return cls(tuple(extract(everything)), tuple(cells), tuple(labels), tuple(scales))

    def amounts(self) -> list[Quantity]:
        return [q for q in self.quantities if q.is_amount]

    def cells_in_row(self, table: int, row: int) -> list[Cell]:
        return [c for c in self.cells if c.table == table and c.row == row and c.quantity.is_amount]

    def cells_labelled(self, label: str) -> list[Cell]:
        return [c for c in self.cells if c.row_label == label and c.quantity.is_amount]


def pipe_tables(text: str) -> list[Table]:
    """Markdown pipe tables in plain text (a rendered document, or a table the client pasted)."""
    tables: list[Table] = []
    rows: list[tuple[str, ...]] = []
    for line in [*text.splitlines(), ""]:
        m = _PIPE_ROW.match(line)
        if m:
            if not _PIPE_RULE.match(line):
                rows.append(tuple(c.strip() for c in m.group(1).split("|")))
            continue
        if len(rows) >= 2:
            tables.append(Table(0, tuple(rows)))
        rows = []
    return tables
