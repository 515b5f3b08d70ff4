"""Arithmetic a draft states, checked: equations, sums, growth rates, shares and ratios.

The draft is reduced to a skeleton where each quantity is a token `<i>`, so the patterns read
like the sentences they match ("grew <0> from <1> to <2>"). Each claim found is recomputed
from the draft's own numbers; whether those numbers match the source is the guard's business.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass

from sits.pipeline.fusion.quantities import Quantity

_T = r"<(\d+)>"
_EQUATION = re.compile(_T + r"((?:\s*[-+−×x*/÷]\s*" + _T + r")+)\s*(?:=|equals)\s*" + _T)
_FROM_TO = re.compile(r"\bfrom\s+(?:\w+\s+){0,3}?" + _T + r"(?:\s+in\s+\S+)?\s+to\s+(?:\w+\s+){0,3}?" + _T)
_SHARE = re.compile(_T + r"[^.;<]{0,40}?\b(?:is|was|or|represents|represented|representing|equal to|equals|"
                    r"accounting for|accounted for|makes up|made up)\s+" + _T + r"\s+of\s+(?:[a-z]+\s+){0,4}?" + _T,
                    re.I)
_RATIO = re.compile(r"\bratio\s+of\s+(?:[a-z]+\s+){0,3}?" + _T + r"\s+to\s+(?:[a-z]+\s+){0,3}?" + _T +
                    r"\s+(?:is|was|of|=|stands at|stood at)\s+" + _T, re.I)
_LIST = _T + r"((?:\)?\s*(?:,|,?\s+and|\s+plus|\s*\+)\s+(?:[a-z]+\s+){0,3}?\(?" + _T + r")+)\)?"
_SUM = re.compile(r"(?:\bsum\s+of\s+(?:[a-z]+\s+){0,3}?)" + _LIST + r"\s+(?:is|was|equals|=|comes to|came to)\s+" + _T
                  + "|" + _LIST + r"\s*(?:,\s*)?(?:total|totals|totalled|totaled|totaling|totalling|sum to|sums to|"
                  r"add up to|adds up to|added up to|combine to|combined to|come to)\s+(?:of\s+)?" + _T, re.I)
_UP = re.compile(r"\b(?:grew|grow|growth|increase|increased|rose|rise|up|gain|gained|higher|expanded|improved)\b", re.I)
_DOWN = re.compile(r"\b(?:fell|fall|decline|declined|decrease|decreased|down|drop|dropped|lower|shrank|contracted)\b",
                   re.I)
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


@dataclass(frozen=True, slots=True)
class ArithmeticClaim:
    text: str
    correct: bool
    detail: str


def check_arithmetic(draft: str, quantities: list[Quantity]) -> list[ArithmeticClaim]:
    """Every claim found in `draft`, whose `quantities` are `extract(draft)`."""
    claims: list[ArithmeticClaim] = []
    for sentence in sentences(skeleton(draft, quantities)):
        for check in (_equations, _sums, _growth, _shares, _ratios):
            claims += check(sentence, quantities)
    return claims


def skeleton(draft: str, quantities: list[Quantity]) -> str:
    """`draft` with quantity i replaced by the token `<i>`."""
    out, last = [], 0
    for i, q in enumerate(quantities):
        out += [draft[last:q.start], f"<{i}>"]
        last = q.end
    out.append(draft[last:])
    return "".join(out)


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?;])\s+|\n+", text) if s.strip()]


def _close(actual: float, stated: Quantity) -> bool:
    return abs(actual - stated.value) <= stated.tolerance * 1.01 + 1e-9 * max(1.0, abs(actual))


def _fmt(value: float) -> str:
    return f"{value:,.2f}".rstrip("0").rstrip(".") if abs(value) < 1e15 else f"{value:.3g}"


def _equations(sentence: str, qs: list[Quantity]) -> list[ArithmeticClaim]:
    claims = []
    for m in _EQUATION.finditer(sentence):
        expression = re.sub(_T, lambda t: repr(qs[int(t.group(1))].value), m.group(0).rsplit("=", 1)[0]
                            .rsplit("equals", 1)[0])
        expression = expression.replace("−", "-").replace("×", "*").replace("÷", "/").replace("x", "*")
        try:
            value = _evaluate(ast.parse(expression.strip(), mode="eval").body)
        except (SyntaxError, ZeroDivisionError, ValueError):
            continue
        stated = qs[int(m.groups()[-1])]
        correct = _close(value, stated) or (stated.kind == "percent" and _close(value * 100, stated))
        text = _text(m.group(0), qs)
        claims.append(ArithmeticClaim(text, correct, f"computes to {_fmt(value)}; stated {stated.text}"))
    return claims


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError("not arithmetic")


def _sums(sentence: str, qs: list[Quantity]) -> list[ArithmeticClaim]:
    claims = []
    for m in _SUM.finditer(sentence):
        tokens = [int(t) for t in re.findall(_T, m.group(0))]
        parts, total = [qs[t] for t in tokens[:-1]], qs[tokens[-1]]
        if len(parts) < 2 or not all(p.is_amount for p in parts) or not total.is_amount:
            continue
        value = sum(p.value for p in parts)
        claims.append(ArithmeticClaim(_text(m.group(0), qs), _close(value, total),
                                      f"{' + '.join(p.text for p in parts)} = {_fmt(value)}; stated {total.text}"))
    return claims


def _growth(sentence: str, qs: list[Quantity]) -> list[ArithmeticClaim]:
    claims = []
    percents = [int(t) for t in re.findall(_T, sentence) if qs[int(t)].kind == "percent"]
    for m in _FROM_TO.finditer(sentence):
        old, new = qs[int(m.group(1))], qs[int(m.group(2))]
        if not (old.is_amount and new.is_amount) or old.value == 0 or not percents:
            continue
        pct = qs[min(percents, key=lambda t: abs(sentence.find(f"<{t}>") - m.start()))]
        change = (new.value - old.value) / abs(old.value) * 100
        says_down = bool(_DOWN.search(sentence)) and not _UP.search(sentence)
        says_up = bool(_UP.search(sentence)) and not _DOWN.search(sentence)
        direction_ok = not ((says_down and change > 0) or (says_up and change < 0))
        correct = _close(abs(change), pct) and direction_ok
        why = "" if direction_ok else f"; the figures went {'up' if change > 0 else 'down'}"
        claims.append(ArithmeticClaim(f"{pct.text}: {old.text} -> {new.text}", correct,
                                      f"change is {change:+.2f}%; stated {pct.text}{why}"))
    return claims


def _shares(sentence: str, qs: list[Quantity]) -> list[ArithmeticClaim]:
    claims = []
    for m in _SHARE.finditer(sentence):
        part, pct, whole = (qs[int(g)] for g in m.groups())
        if not (part.is_amount and whole.is_amount and pct.kind == "percent") or whole.value == 0:
            continue
        share = part.value / whole.value * 100
        claims.append(ArithmeticClaim(_text(m.group(0), qs), _close(share, pct),
                                      f"{part.text} / {whole.text} = {share:.2f}%; stated {pct.text}"))
    return claims


def _ratios(sentence: str, qs: list[Quantity]) -> list[ArithmeticClaim]:
    claims = []
    for m in _RATIO.finditer(sentence):
        a, b, stated = (qs[int(g)] for g in m.groups())
        if not (a.is_amount and b.is_amount) or b.value == 0:
            continue
        ratio = a.value / b.value
        correct = _close(ratio, stated) or (stated.kind == "percent" and _close(ratio * 100, stated))
        claims.append(ArithmeticClaim(_text(m.group(0), qs), correct,
                                      f"{a.text} / {b.text} = {ratio:.4g}; stated {stated.text}"))
    return claims


def _text(skeleton_part: str, qs: list[Quantity]) -> str:
    return re.sub(_T, lambda t: qs[int(t.group(1))].text, skeleton_part).strip()
