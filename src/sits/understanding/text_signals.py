"""Cheap lexical signals of a prompt, shared by the rules stage and the complexity estimator.

Pure regex and counting work: microseconds for a short prompt, so it can run inline
on the request path before anything expensive.
"""

from __future__ import annotations

import re

CODE = re.compile(
    r"```|\bdef \w+\(|\bclass \w+[:(]|\bfunction\b|#include|\bSELECT\b.+\bFROM\b|=>|\breturn\b|"
    r"\bimport \w+|\bconsole\.log|\bpublic static\b|\{\s*$|;\s*$",
    re.MULTILINE | re.IGNORECASE,
)
MATH = re.compile(
    r"\d+\s*[-+*/^=×÷]\s*\d+|\\frac|\\sqrt|\$[^$]+\$|\bintegral\b|\bderivative\b|\bprove\b|\bequation\b|"
    r"\bsolve\b|\bprobability\b|求解|方程|概率|计算",
    re.IGNORECASE,
)
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
QUESTION = re.compile(r"[?？]")
# Numbered or bulleted steps and connectives that stack sub-tasks inside one instruction.
LIST_ITEM = re.compile(r"^\s*(?:\d+[.)、]|[-*•]|\(?[a-z]\))\s+", re.MULTILINE)
CONNECTIVE = re.compile(
    r"\b(?:then|and then|after that|finally|first|second|next|also|additionally|for each|unless|"
    r"if|otherwise|except|while)\b|然后|并且|首先|其次|最后|如果|否则",
    re.IGNORECASE,
)
_WORD = re.compile(r"[\u3400-\u9fff]|[A-Za-z0-9_]+|[^\sA-Za-z0-9_]")


def tokens(text: str) -> list[str]:
    """Words, single CJK characters and punctuation: a tokenizer-free proxy for model tokens."""
    return _WORD.findall(text.lower())


def cjk_ratio(text: str) -> float:
    letters = sum(1 for c in text if not c.isspace())
    return len(CJK.findall(text)) / letters if letters else 0.0


def bracket_depth(text: str) -> int:
    """Deepest nesting of (), [], {} and quotes-free parentheses; unbalanced closers are ignored."""
    depth = deepest = 0
    for c in text:
        if c in "([{（【":
            depth += 1
            deepest = max(deepest, depth)
        elif c in ")]}）】" and depth:
            depth -= 1
    return deepest
