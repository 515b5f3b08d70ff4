"""Intent-to-model and intent-to-workflow routing rules from config."""

from __future__ import annotations

from dataclasses import dataclass

from sits.understanding.rules_stage import IntentGuess


@dataclass(frozen=True, slots=True)
class IntentRoute:
    intent: str
    model: str | None = None
    workflow: str | None = None
    min_confidence: float = 0.5


@dataclass(frozen=True, slots=True)
class IntentRoutes:
    routes: tuple[IntentRoute, ...] = ()

    def route_for(self, guess: IntentGuess) -> IntentRoute | None:
        """The first rule for the guessed intent whose confidence bar the guess clears."""
        for r in self.routes:
            if r.intent == guess.label and guess.confidence >= r.min_confidence:
                return r
        return None
