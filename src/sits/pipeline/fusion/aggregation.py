"""Choosing one answer from several drafts, with a raw confidence in [0, 1].

- weighted vote (short answers): drafts that say the same thing (after normalising case,
  spacing and punctuation) pool their branch weights; raw confidence is the winner's share,
  times its verifier score when there is one;
- best-of-N: the draft with the best verifier score (ties: higher weight, then earlier);
  raw confidence is that score;
- panel + judge: a judge model picks among the drafts (the runner asks it); raw confidence
  is the picked draft's verifier score when there is one, else the judge's pick counts 0.5.

A draft whose claims nothing could check gets a neutral score of 0.5.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sits.pipeline.fusion.symbolic_guard import Verdict

NEUTRAL = 0.5
_PUNCT = re.compile(r"[^\w%$.,-]+")


@dataclass(frozen=True, slots=True)
class Candidate:
    branch: int
    model: str
    content: str
    weight: float
    verdict: Verdict | None = None
    judge_score: float | None = None  # 1 PASS, 0 FAIL, None: no judge or unreadable
    finish_reason: str = "stop"

    @property
    def score(self) -> float | None:
        """Mean of the verifiers that had something to say."""
        scores = [s for s in (self.verdict.score if self.verdict else None, self.judge_score) if s is not None]
        return sum(scores) / len(scores) if scores else None


@dataclass(frozen=True, slots=True)
class Choice:
    candidate: Candidate
    raw_confidence: float
    method: str
    detail: str


def normalise(answer: str) -> str:
    return _PUNCT.sub(" ", answer.lower()).strip(" .,")


def weighted_vote(candidates: Sequence[Candidate]) -> Choice:
    totals: dict[str, float] = {}
    first: dict[str, Candidate] = {}
    for c in candidates:
        key = normalise(c.content)
        totals[key] = totals.get(key, 0.0) + c.weight
        first.setdefault(key, c)
    winner = max(totals, key=lambda k: (totals[k], -first[k].branch))
    share = totals[winner] / sum(totals.values())
    chosen = first[winner]
    score = chosen.score
    raw = share * score if score is not None else share
    return Choice(chosen, raw, "weighted_vote", f"{len(totals)} distinct answers; winner weight share {share:.2f}")


def best_of_n(candidates: Sequence[Candidate]) -> Choice:
    chosen = max(candidates, key=lambda c: (c.score if c.score is not None else NEUTRAL, c.weight, -c.branch))
    score = chosen.score if chosen.score is not None else NEUTRAL
    return Choice(chosen, score, "best_of_n", f"best verifier score {score:.2f} of {len(candidates)} drafts")


def judged(candidates: Sequence[Candidate], pick: int | None) -> Choice:
    """panel_judge: the judge's pick (1-based, as the judge was asked); best-of-N when it gave none."""
    if pick is None or not 1 <= pick <= len(candidates):
        fallback = best_of_n(candidates)
        return Choice(fallback.candidate, fallback.raw_confidence, "panel_judge",
                      "judge gave no usable pick; best verifier score used")
    chosen = candidates[pick - 1]
    raw = chosen.score if chosen.score is not None else NEUTRAL
    return Choice(chosen, raw, "panel_judge", f"judge picked draft {pick} of {len(candidates)}")


def single(candidate: Candidate) -> Choice:
    score = candidate.score
    return Choice(candidate, score if score is not None else NEUTRAL, "single", "one draft")
