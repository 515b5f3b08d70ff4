"""Builds a `RequestUnderstander` from `UnderstandingConfig`: the one place that wires its parts.

Building embeds the domain examples, which takes seconds with a real model: call it
from a thread at startup (`asyncio.to_thread`), never on the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sits.understanding.cascade import CascadeStages, IntentCascade
from sits.understanding.domains import Domain, load_domains
from sits.understanding.embedders import Embedder, make_embedder
from sits.understanding.embedding_cache import cached_embed
from sits.understanding.intent_classifier import IntentClassifier, build_intent_classifier
from sits.understanding.micro_batcher import MicroBatcher
from sits.understanding.quality_router.artifact import load_router
from sits.understanding.quality_router.request_router import QualityRouting
from sits.understanding.rules_stage import IntentGuess, RulesStage
from sits.understanding.settings import UnderstandingConfig
from sits.understanding.tier_selection import DualFactorTierHandler
from sits.understanding.understander import RequestUnderstander


@dataclass(frozen=True)
class IntentParts:
    rules: RulesStage
    classifier: IntentClassifier | None
    embedder: Embedder | None
    cascade: CascadeStages | None = None  # with `embedder: cascade`, instead of classifier/embedder

    def classify_offline(self, texts: Sequence[str], cache_dir: Path | None = None) -> list[IntentGuess]:
        """The gateway's decision (rules, then classifier) for many texts at once, with no deadline.

        For the CLI and evaluations: embeddings of the texts the rules leave go in one
        batched, disk-cached call instead of one request each.
        """
        guesses: list[IntentGuess | None] = [self.rules.match(t) for t in texts]
        todo = [i for i, g in enumerate(guesses) if g is None and texts[i].strip()]
        if todo and self.cascade is not None:
            for i, g in zip(todo, self.cascade.classify_offline([texts[i] for i in todo], cache_dir)):
                guesses[i] = g
        elif todo and self.classifier is not None and self.embedder is not None:
            vectors = cached_embed(self.embedder, [texts[i] for i in todo], cache_dir)
            for i, g in zip(todo, self.classifier.classify_vectors(vectors)):
                guesses[i] = g
        return [g or self.rules.decide(t) for g, t in zip(guesses, texts)]


def build_intent_parts(
    config: UnderstandingConfig, domains: tuple[Domain, ...] | None = None, cache_dir: Path | None = None,
) -> IntentParts:
    if domains is None:
        domains = load_domains(Path(config.domains_file) if config.domains_file else None)
    fallback = "general_chat" if any(d.name == "general_chat" for d in domains) else domains[-1].name
    rules = RulesStage(domains, fallback_label=fallback)
    if not config.enabled:
        return IntentParts(rules, None, None)
    if config.embedder == "cascade":
        c = config.cascade
        fast, accurate = make_embedder(c.fast), make_embedder(c.accurate)
        stages = CascadeStages(build_intent_classifier(domains, fast, cache_dir), fast,
                               build_intent_classifier(domains, accurate, cache_dir), accurate, c.min_margin)
        return IntentParts(rules, None, None, stages)
    embedder = make_embedder(config.embedder)
    return IntentParts(rules, build_intent_classifier(domains, embedder, cache_dir), embedder)


def build_understander(
    config: UnderstandingConfig, domains: tuple[Domain, ...] | None = None, cache_dir: Path | None = None,
    timeout_s: float | None = -1.0,
) -> RequestUnderstander:
    """`timeout_s=-1` takes the config's classify timeout; None waits for the classifier (CLI, evals)."""
    parts = build_intent_parts(config, domains, cache_dir)
    tiers = DualFactorTierHandler(config.tier.to_params())
    if timeout_s is not None and timeout_s < 0:
        timeout_s = config.classify_timeout_ms / 1000
    if parts.cascade is None and (parts.classifier is None or parts.embedder is None):
        return RequestUnderstander(parts.rules, tiers, config.to_routes(), timeout_s=timeout_s)

    def batcher_for(embedder: Embedder) -> MicroBatcher:
        return MicroBatcher(embedder.embed, max_batch=config.micro_batch, max_wait_s=config.batch_wait_ms / 1000)

    loaded = [parts.cascade.fast_embedder, parts.cascade.accurate_embedder] if parts.cascade else [parts.embedder]
    routing, router_batcher = None, None
    if config.quality_router is not None:
        qr = config.quality_router
        routing = QualityRouting(load_router(Path(qr.path)), qr.cost_weight, qr.quality_target)
        # The router may be trained on another embedder than the intent classifier's.
        same = [e for e in loaded if e is not None and e.name == routing.embedder]
        router_batcher = batcher_for(same[0] if same else make_embedder(routing.embedder))
    if parts.cascade is not None:
        cascade = IntentCascade(parts.cascade, batcher_for(parts.cascade.fast_embedder),
                                batcher_for(parts.cascade.accurate_embedder), config.cascade.cache_entries)
        return RequestUnderstander(parts.rules, tiers, config.to_routes(), timeout_s=timeout_s, cascade=cascade,
                                   quality_routing=routing, router_batcher=router_batcher)
    assert parts.classifier is not None and parts.embedder is not None
    return RequestUnderstander(parts.rules, tiers, config.to_routes(), parts.classifier, batcher_for(parts.embedder),
                               timeout_s=timeout_s, quality_routing=routing, router_batcher=router_batcher)
