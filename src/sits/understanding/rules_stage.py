"""The zero-cost rules stage: each domain's regexes, tried in order, before any embedding.

It is also the fallback when the embedding classifier is slow or unavailable, so it
always answers: a rule hit, or the fallback domain with low confidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sits.understanding.domains import Domain


@dataclass(frozen=True, slots=True)
class IntentGuess:
    label: str
    confidence: float
    source: str  # "rules", "embedding", "fallback"


@dataclass(frozen=True, slots=True)
class RulesStage:
    domains: Sequence[Domain]
    fallback_label: str = "general_chat"
    rule_confidence: float = 0.9
    fallback_confidence: float = 0.2

    def match(self, text: str) -> IntentGuess | None:
        """The first domain with a matching rule, or None. Several domains hit: the one with most hits wins."""
        best: tuple[int, str] | None = None
        for d in self.domains:
            hits = sum(1 for r in d.rules if r.search(text))
            if hits and (best is None or hits > best[0]):
                best = (hits, d.name)
        return IntentGuess(best[1], self.rule_confidence, "rules") if best else None

    def decide(self, text: str) -> IntentGuess:
        return self.match(text) or IntentGuess(self.fallback_label, self.fallback_confidence, "fallback")
