"""Auxiliary outcome data (other models' scores on other prompt sets) and the rule that keeps it honest.

A prompt held out for evaluation must never reach training in any form, so every auxiliary
row that may be the same question as a protected (held-out) prompt is dropped first.
Matching is conservative, on normalised text (lower case, whitespace collapsed):

- a prompt's *stem* is its question without the answer options: a leading "Question:" is
  removed and the text is cut at the first option or answer line ("A." / "A)" / "(A)" /
  "Answer:" / "答案"); few-shot prompts give one stem per blank-line-separated block;
- an auxiliary row is dropped when its stem equals a protected stem, when its stem occurs
  inside a protected prompt (an empty stem counts, so it is always dropped), or when a
  protected stem of at least MIN_CONTAINED characters occurs inside the auxiliary prompt.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

MIN_CONTAINED = 20  # shorter protected stems ("Which is true?") would match everything
_OPTIONS = re.compile(r"\n\s*(?:\(?[a-e][.)]|answer:|答案)", re.IGNORECASE)
_QUESTION = re.compile(r"^\s*question:\s*", re.IGNORECASE)
_BLOCKS = re.compile(r"\n\s*\n")


def normalise(text: str) -> str:
    return " ".join(text.lower().split())


def question_stem(prompt: str) -> str:
    text = _QUESTION.sub("", prompt.strip())
    cut = _OPTIONS.search(text)
    return normalise(text[: cut.start()] if cut else text)


def prompt_stems(prompt: str) -> set[str]:
    """The whole prompt's stem and, for few-shot prompts, each block's (short block stems skipped)."""
    blocks = {question_stem(b) for b in _BLOCKS.split(prompt)}
    return {s for s in blocks if len(s) >= MIN_CONTAINED} | {question_stem(prompt)}


def overlapping_rows(aux_prompts: Sequence[str], protected: Sequence[str]) -> np.ndarray:
    """Boolean mask over `aux_prompts`: True where the row may be a protected prompt (drop it)."""
    out = np.zeros(len(aux_prompts), dtype=bool)
    if not protected or not aux_prompts:
        return out
    stems: set[str] = set()
    for p in protected:
        stems |= prompt_stems(p)
    protected_text = "\x00".join(normalise(p) for p in protected)
    aux_text = [normalise(p) for p in aux_prompts]
    for i, p in enumerate(aux_prompts):
        s = question_stem(p)
        out[i] = s in stems or s in protected_text
    # The other direction: a protected question quoted inside a longer auxiliary prompt.
    joined = "\x00".join(aux_text)
    starts = np.cumsum([0] + [len(t) + 1 for t in aux_text])
    for s in stems:
        if len(s) < MIN_CONTAINED:
            continue
        at = joined.find(s)
        while at >= 0:
            out[int(np.searchsorted(starts, at, side="right")) - 1] = True
            at = joined.find(s, at + 1)
    return out
