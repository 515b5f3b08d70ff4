"""Numbers, percentages, currency amounts and dates as they are written in prose and tables.

Each one keeps its place in the text and the tolerance its writing implies: "$1.5 million"
stands for anything within $50,000 of 1.5e6, "28%" for 27.5..28.5, "1,540,000" for itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["number", "percent", "currency", "date", "year"]

_MONTHS = {m: i for i, names in enumerate(
    [("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
     ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"),
     ("november", "nov"), ("december", "dec")], start=1) for m in names}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DATE_PATTERNS = [
    re.compile(r"\b(?P<year>\d{4})-(?P<mnum>\d{1,2})-(?P<day>\d{1,2})\b"),
    re.compile(_MONTH.join([r"\b", r"\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<year>\d{4})\b"]), re.I),
    re.compile(r"\b(?P<day>\d{1,2})(?:st|nd|rd|th)?\s+" + _MONTH + r",?\s+(?P<year>\d{4})\b", re.I),
    re.compile(r"\b(?P<mnum>\d{1,2})/(?P<day>\d{1,2})/(?P<year>\d{4})\b"),
    re.compile(r"\b" + _MONTH + r",?\s+(?P<year>\d{4})\b", re.I),
    re.compile(r"\bQ(?P<quarter>[1-4])\s*(?:FY\s?)?'?(?P<year>\d{4})\b", re.I),
    re.compile(r"\bFY\s?(?P<year>\d{4})\b", re.I),
]
_NUMBER = re.compile(
    r"(?P<cur>US\$|[$€£¥]|\b(?:USD|EUR|GBP|JPY)\s?)?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?P<scale>\s?(?:thousand|million|billion|trillion|mn|bn)\b|(?:k|m|b|bn|mn)\b)?"
    r"(?P<pct>\s?%|\s?per\s?cent\b)?"
    r"(?P<cur2>\s?(?:USD|EUR|GBP|dollars|euros)\b)?",
    re.I,
)
_SCALES = {"thousand": 1e3, "k": 1e3, "million": 1e6, "m": 1e6, "mn": 1e6, "billion": 1e9, "b": 1e9, "bn": 1e9,
           "trillion": 1e12}


@dataclass(frozen=True, slots=True)
class Quantity:
    kind: Kind
    text: str
    start: int
    end: int
    value: float  # numbers: the value; dates: year
    tolerance: float  # half a unit of the last digit written, at the written scale
    month: int | None = None
    day: int | None = None
    quarter: int | None = None

    @property
    def is_amount(self) -> bool:
        return self.kind in ("number", "currency")

    def date_key(self) -> tuple[int, int | None, int | None, int | None]:
        return int(self.value), self.month, self.day, self.quarter


def extract(text: str) -> list[Quantity]:
    """Every quantity in `text`, in order. Dates are read first so their digits are not numbers;
    bare integers below 10 (counts, list markers) and digits glued to letters (Q3, H2, COVID-19) are skipped."""
    found: list[Quantity] = []
    masked = list(text)
    for pattern in _DATE_PATTERNS:
        for m in pattern.finditer("".join(masked)):
            q = _date(m)
            if q is not None:
                found.append(q)
                masked[m.start():m.end()] = " " * (m.end() - m.start())
    plain = "".join(masked)
    for m in _NUMBER.finditer(plain):
        q = _number(m, plain)
        if q is not None:
            found.append(q)
    return sorted(found, key=lambda q: q.start)


def _date(m: re.Match[str]) -> Quantity | None:
    groups = m.groupdict()
    year = int(groups["year"])
    if not 1900 <= year <= 2100:
        return None
    month = _MONTHS[groups["month"].lower()] if groups.get("month") else (
        int(groups["mnum"]) if groups.get("mnum") else None)
    day = int(groups["day"]) if groups.get("day") else None
    if month is not None and day is not None and month > 12 >= day:  # 31/03/2024: day first
        month, day = day, month
    if (month is not None and not 1 <= month <= 12) or (day is not None and not 1 <= day <= 31):
        return None
    quarter = int(groups["quarter"]) if groups.get("quarter") else None
    return Quantity("date", m.group(0), m.start(), m.end(), float(year), 0.0, month, day, quarter)


def _number(m: re.Match[str], text: str) -> Quantity | None:
    start = m.start("num") if not m.group("cur") else m.start()
    before = text[max(0, m.start() - 2):m.start()]
    if before[-1:].isalpha() or before[-1:] == "_" or (before[-1:] == "-" and before[:1].isalpha()):
        return None  # part of an identifier: Q3, H2, COVID-19
    if text[m.end("num"):m.end("num") + 1].isalpha() and not m.group("scale") and not m.group("pct"):
        return None  # 3rd, 10x, 5G
    digits = m.group("num")
    number = float(digits.replace(",", ""))
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    scale_word = (m.group("scale") or "").strip().lower()
    scale = _SCALES.get(scale_word, 1.0)
    currency = bool(m.group("cur") or m.group("cur2"))
    pct = bool(m.group("pct"))
    if scale_word in ("m", "b", "k") and not currency:
        scale = 1.0 if scale_word != "k" else 1e3  # "5m" without a currency is likely metres; "5k" is not
        if scale_word in ("m", "b"):
            return None
    tolerance = 0.5 * 10 ** -decimals * scale
    kind: Kind = "percent" if pct else "currency" if currency else "number"
    if kind == "number" and scale == 1.0 and "," not in digits and "." not in digits:
        if number < 10:
            return None
        if 1900 <= number <= 2100:
            kind = "year"
    return Quantity(kind, text[start:m.end()].strip(), start, m.end(), number * scale, tolerance)
