"""SymbolicGuard: every number, percentage, currency amount and date a draft cites, checked
against the source, plus the arithmetic the draft states.

A cited amount is *supported* when the source holds it (within the precision the draft wrote
it with, at the scale the source declares: "in thousands"); *misattributed* when the sentence
names a table row (say "costs") and the value is in another row instead, or when a sentence
with one amount and one year ("revenue in FY2023 was ...") cites another year's figure;
*derived* when it is the sum or difference of two figures of one table column; else *unsupported*, with the
nearest source figure. A percentage may also be derived: a growth rate or share computed from
figures the same sentence cites, or from the row the sentence names. Stated arithmetic is
*correct* or *wrong*. The score is the share of checks that passed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import permutations
from typing import Literal

from sits.pipeline.fusion.arithmetic import check_arithmetic
from sits.pipeline.fusion.quantities import Quantity, extract
from sits.pipeline.fusion.source_facts import Cell, SourceFacts

Status = Literal["supported", "derived", "misattributed", "unsupported", "correct", "wrong"]
PASSING = frozenset({"supported", "derived", "correct"})
SUBSTANTIVE = frozenset({"number", "currency", "percent", "arithmetic"})  # dates alone say little
_BOUNDARY = re.compile(r"(?<=[.!?;])\s+|\n+")


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  # number, percent, currency, date, year, arithmetic
    text: str
    status: Status
    detail: str

    @property
    def ok(self) -> bool:
        return self.status in PASSING

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text, "status": self.status, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Verdict:
    findings: tuple[Finding, ...]

    @property
    def checked(self) -> int:
        return len(self.findings)

    @property
    def passed(self) -> int:
        return sum(1 for f in self.findings if f.ok)

    @property
    def score(self) -> float | None:
        """Share of checks passed; None when the draft cites no amount, percentage or arithmetic
        (a draft that only repeats the report's dates has told nothing that could be checked)."""
        if not any(f.kind in SUBSTANTIVE for f in self.findings):
            return None
        return self.passed / self.checked

    def mismatches(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok]

    def summary(self) -> str:
        return f"checked={self.checked}; passed={self.passed}; mismatches={self.checked - self.passed}"


class SymbolicGuard:
    def check(self, draft: str, facts: SourceFacts) -> Verdict:
        quantities = extract(draft)
        sentence_of = _sentence_ids(draft, quantities)
        labels = _row_labels(draft, quantities, sentence_of, facts.row_labels)
        findings = []
        for i, q in enumerate(quantities):
            same_sentence = [p for j, p in enumerate(quantities) if sentence_of[j] == sentence_of[i] and p.is_amount]
            years = {int(p.value) for j, p in enumerate(quantities)
                     if sentence_of[j] == sentence_of[i] and p.kind in ("date", "year")}
            year = next(iter(years)) if len(years) == 1 and len(same_sentence) == 1 else None  # unambiguous only
            sentence = _sentence_text(draft, quantities, sentence_of, i)
            if q.kind in ("date", "year"):
                findings.append(_check_date(q, facts))
            elif q.kind == "percent":
                findings.append(_check_percent(q, facts, same_sentence, sentence))
            else:
                findings.append(_check_amount(q, labels[i], year, facts))
        for claim in check_arithmetic(draft, quantities):
            findings.append(Finding("arithmetic", claim.text, "correct" if claim.correct else "wrong", claim.detail))
        return Verdict(tuple(findings))


def _close(q: Quantity, value: float) -> bool:
    return abs(abs(q.value) - abs(value)) <= q.tolerance * 1.01 + 1e-9 * abs(value)


def _check_amount(q: Quantity, labels: tuple[str, ...], year: int | None, facts: SourceFacts) -> Finding:
    cells = [c for c in facts.cells if c.quantity.is_amount and any(_close(q, c.quantity.value * s) for s in facts.scales)]
    if year is not None and cells:
        wrong_year = _other_year(cells, labels, year, facts)
        if wrong_year is not None:
            return Finding(q.kind, q.text, "misattributed",
                           f"the sentence is about {year}, but {q.text} is {wrong_year.where()} in the source")
    if labels:
        mine = [c for c in cells if c.row_label in labels]
        if mine:
            return Finding(q.kind, q.text, "supported", mine[0].where())
        if cells and any(facts.cells_labelled(label) for label in labels):
            return Finding(q.kind, q.text, "misattributed",
                           f"the sentence is about '{labels[-1]}', but {q.text} is {cells[0].where()} in the source")
    if cells:
        return Finding(q.kind, q.text, "supported", cells[0].where())
    if any(_close(q, s.value * scale) for s in facts.amounts() for scale in facts.scales):
        return Finding(q.kind, q.text, "supported", "in the text")
    derived = _derived_amount(q, facts)
    if derived:
        return Finding(q.kind, q.text, "derived", derived)
    return Finding(q.kind, q.text, "unsupported", _nearest(q, facts, labels[-1] if labels else ""))


def _other_year(cells: list[Cell], labels: tuple[str, ...], year: int, facts: SourceFacts) -> Cell | None:
    """A matching cell of another year's column, when none matches in `year`'s column and the
    table (in the named row, if any) has a column for `year`; else None."""
    candidates = [c for c in cells if c.row_label in labels] or cells
    if any(_year_of(c.column_label) == year for c in candidates):
        return None
    for c in candidates:
        other = _year_of(c.column_label)
        if other is not None and other != year and any(
                _year_of(d.column_label) == year for d in facts.cells
                if d.table == c.table and d.row == c.row):
            return c
    return None


def _year_of(label: str) -> int | None:
    years = [int(q.value) for q in extract(label) if q.kind in ("date", "year")]
    return years[0] if len(years) == 1 else None


def _derived_amount(q: Quantity, facts: SourceFacts) -> str:
    columns: dict[tuple[int, int], list[Cell]] = {}
    for c in facts.cells:
        if c.quantity.is_amount and c.row > 0:
            columns.setdefault((c.table, c.column), []).append(c)
    for column in columns.values():
        for a, b in permutations(column, 2):
            for scale in facts.scales:
                if _close(q, (a.quantity.value + b.quantity.value) * scale) and a.row < b.row:
                    return f"= {a.row_label} + {b.row_label} ({a.column_label or 'same column'})"
                if _close(q, (a.quantity.value - b.quantity.value) * scale):
                    return f"= {a.row_label} - {b.row_label} ({a.column_label or 'same column'})"
    return ""


def _nearest(q: Quantity, facts: SourceFacts, label: str) -> str:
    pool = facts.cells_labelled(label) if label and facts.cells_labelled(label) else \
        [c for c in facts.cells if c.quantity.is_amount]
    if not pool:
        return "not in the source"
    best = min(pool, key=lambda c: min(abs(q.value - c.quantity.value * s) for s in facts.scales))
    return f"not in the source; nearest is {best.quantity.text} ({best.where()})"


def _check_percent(q: Quantity, facts: SourceFacts, amounts: list[Quantity], sentence: str) -> Finding:
    for c in facts.cells:
        if c.quantity.kind == "percent" and _close(q, c.quantity.value):
            return Finding("percent", q.text, "supported", c.where())
    if any(s.kind == "percent" and _close(q, s.value) for s in facts.quantities):
        return Finding("percent", q.text, "supported", "in the text")
    for a, b in permutations(amounts, 2):
        if a.value and _close(q, (b.value - a.value) / a.value * 100):
            return Finding("percent", q.text, "derived", f"change from {a.text} to {b.text}")
        if b.value and _close(q, a.value / b.value * 100):
            return Finding("percent", q.text, "derived", f"{a.text} / {b.text}")
    lowered = sentence.lower()
    named = [label for label in facts.row_labels if label in lowered]
    for label in named:
        row = facts.cells_labelled(label)
        for a, b in permutations(row, 2):
            if a.table == b.table and a.quantity.value and _close(q, (b.quantity.value - a.quantity.value)
                                                                   / a.quantity.value * 100):
                return Finding("percent", q.text, "derived",
                               f"{label}: change from {a.column_label or a.quantity.text} to "
                               f"{b.column_label or b.quantity.text}")
    for top, bottom in permutations(named, 2):
        for a in facts.cells_labelled(top):
            for b in facts.cells_labelled(bottom):
                if (a.table, a.column) == (b.table, b.column) and b.quantity.value and \
                        _close(q, a.quantity.value / b.quantity.value * 100):
                    return Finding("percent", q.text, "derived", f"{top} / {bottom} ({a.column_label})")
    return Finding("percent", q.text, "unsupported", "not in the source and not computable from the figures cited")


def _check_date(q: Quantity, facts: SourceFacts) -> Finding:
    year, month, day, quarter = q.date_key()
    for s in facts.quantities:
        if s.kind not in ("date", "year") or int(s.value) != year:
            continue
        if month is not None and s.month != month:
            continue
        if day is not None and s.day != day:
            continue
        if quarter is not None and s.quarter != quarter and not (s.month and (s.month - 1) // 3 + 1 == quarter):
            continue
        return Finding(q.kind, q.text, "supported", f"source says {s.text}")
    return Finding(q.kind, q.text, "unsupported", "this date is not in the source")


def _sentence_ids(draft: str, quantities: list[Quantity]) -> list[int]:
    ends = [m.start() for m in _BOUNDARY.finditer(draft)]
    return [sum(1 for e in ends if e < q.start) for q in quantities]


def _sentence_text(draft: str, quantities: list[Quantity], sentence_of: list[int], i: int) -> str:
    spans = [m.span() for m in _BOUNDARY.finditer(draft)]
    k = sentence_of[i]
    start = spans[k - 1][1] if k > 0 else 0
    end = spans[k][0] if k < len(spans) else len(draft)
    return draft[start:end]


def _row_labels(draft: str, quantities: list[Quantity], sentence_of: list[int],
                labels: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The table rows each quantity may be about: the row labels named between it and the previous
    quantity of its sentence ("products revenue of $433,000": products or revenue), else the previous ones."""
    found: list[tuple[str, ...]] = []
    current: tuple[str, ...] = ()
    previous_end, previous_sentence = 0, -1
    lowered = draft.lower()
    starts = [0, *(m.end() for m in _BOUNDARY.finditer(draft))]
    for q, sentence in zip(quantities, sentence_of, strict=True):
        if sentence != previous_sentence:
            current, previous_sentence, previous_end = (), sentence, starts[sentence]
        gap = lowered[previous_end:q.start]
        named = sorted((gap.rfind(label), label) for label in labels if label in gap)
        if named:
            current = tuple(label for _, label in named)  # nearest last
        found.append(current)
        previous_end = q.end
    return found
