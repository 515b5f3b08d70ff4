"""Step 1 of the director: what a request needs, decided before choosing where it goes.

`RequestUnderstander.understand(prompt, load_of)` returns a frozen `Understanding`: intent
and confidence, complexity, tier and the intent route, within a bounded time. The
cascade: zero-cost rules first; otherwise the embedding classifier as a producer on
a worker thread (micro-batched) under a timeout; on timeout or failure the rules
stage's fallback answers, so a slow classifier never stalls a request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sits.understanding.cascade import IntentCascade
from sits.understanding.complexity import ComplexityWeights, estimate_complexity
from sits.understanding.intent_classifier import IntentClassifier
from sits.understanding.intent_routes import IntentRoute, IntentRoutes
from sits.understanding.micro_batcher import MicroBatcher
from sits.understanding.quality_router.request_router import QualityRouting, RouterChoice
from sits.understanding.rules_stage import IntentGuess, RulesStage
from sits.understanding.tier_selection import DualFactorTierHandler

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Understanding:
    intent: str
    confidence: float
    # "rules", "embedding", "embedding:<embedder>" (which cascade stage decided),
    # "fallback" (classifier timed out or failed), "none"
    intent_source: str
    complexity: float
    tier: str
    reason: str
    route: IntentRoute | None = None
    router: RouterChoice | None = None  # set when a trained quality router is configured and answered in time

    def intent_header(self) -> str:
        """The value of `x-sits-intent`."""
        return f"{self.intent}; confidence={self.confidence:.2f}; source={self.intent_source}"


class RequestUnderstander:
    def __init__(
        self,
        rules: RulesStage,
        tiers: DualFactorTierHandler,
        routes: IntentRoutes = IntentRoutes(),
        classifier: IntentClassifier | None = None,
        batcher: MicroBatcher | None = None,
        timeout_s: float | None = 0.05,
        complexity_weights: ComplexityWeights = ComplexityWeights(),
        quality_routing: QualityRouting | None = None,
        router_batcher: MicroBatcher | None = None,
        cascade: IntentCascade | None = None,
    ) -> None:
        if (classifier is None) != (batcher is None):
            raise ValueError("give both classifier and batcher, or neither")
        if cascade is not None and classifier is not None:
            raise ValueError("give a cascade or a classifier, not both")
        if (quality_routing is None) != (router_batcher is None):
            raise ValueError("give both quality_routing and router_batcher, or neither")
        self._rules = rules
        self._quality_critical = frozenset(d.name for d in rules.domains if d.quality_critical)
        self._tiers = tiers
        self._routes = routes
        self._classifier = classifier
        self._batcher = batcher
        self._timeout_s = timeout_s
        self._weights = complexity_weights
        self._routing = quality_routing
        self._router_batcher = router_batcher
        self._cascade = cascade
        self.timeouts = 0  # how often the classifier or router missed its deadline; for metrics

    @property
    def cascade(self) -> IntentCascade | None:
        return self._cascade

    def _batchers(self) -> list[MicroBatcher]:
        return [b for b in (self._batcher, self._router_batcher) if b is not None]

    async def start(self) -> None:
        for b in self._batchers():
            await b.start()
        if self._cascade is not None:
            await self._cascade.start()

    async def aclose(self) -> None:
        for b in self._batchers():
            await b.aclose()
        if self._cascade is not None:
            await self._cascade.aclose()

    async def classify(self, prompt: str) -> IntentGuess:
        hit = self._rules.match(prompt)
        no_model = self._cascade is None and (self._classifier is None or self._batcher is None)
        if hit is not None or no_model or not prompt.strip():
            return hit or self._rules.decide(prompt)
        try:
            if self._cascade is not None:
                return await self._cascade.classify(prompt, self._timeout_s)
            assert self._batcher is not None and self._classifier is not None
            vector = await asyncio.wait_for(self._batcher.embed(prompt), self._timeout_s)
        except TimeoutError:
            self.timeouts += 1
            return self._rules.decide(prompt)
        except Exception:  # a broken model must not fail the request; the rules still answer
            log.exception("intent classifier failed; using the rules stage")
            return self._rules.decide(prompt)
        return self._classifier.classify_vectors(vector)[0]

    async def route_models(self, prompt: str, candidates: Sequence[str] = ()) -> RouterChoice | None:
        """The quality router's choice among `candidates`; None if unconfigured, timed out or failed."""
        if self._routing is None or self._router_batcher is None or not prompt.strip():
            return None
        try:
            vector = await asyncio.wait_for(self._router_batcher.embed(prompt), self._timeout_s)
        except TimeoutError:
            self.timeouts += 1
            return None
        except Exception:
            log.exception("quality router failed; routing without it")
            return None
        return self._routing.choose(vector, candidates)

    async def understand(self, prompt: str, load_of: Callable[[str], float] | None = None,
                         candidates: Sequence[str] = ()) -> Understanding:
        """Bounded by the classifier timeout plus microseconds of regex work; never raises for content.

        `load_of(tier)`, a tier's in-flight fraction in [0, 1], feeds tier selection (None: idle);
        `candidates` limits the quality router's choice.
        """
        if self._routing is not None:
            guess, routed = await asyncio.gather(self.classify(prompt), self.route_models(prompt, candidates))
        else:
            guess, routed = await self.classify(prompt), None
        complexity = estimate_complexity(prompt, self._weights)
        critical = guess.label in self._quality_critical
        choice = self._tiers.choose(complexity.score, load_of or _idle, critical)
        route = self._routes.route_for(guess)
        reason = f"intent {guess.label} ({guess.source} {guess.confidence:.2f}); {complexity.describe()}; {choice.reason}"
        if routed is not None:
            reason += f"; {routed.reason}"
        return Understanding(guess.label, guess.confidence, guess.source, complexity.score, choice.tier, reason,
                             route, routed)


def _idle(tier: str) -> float:
    return 0.0
