from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from sits.understanding.domains import Domain, load_domains
from sits.understanding.embedders import CharNgramEmbedder
from sits.understanding.intent_classifier import build_intent_classifier
from sits.understanding.intent_routes import IntentRoute, IntentRoutes
from sits.understanding.micro_batcher import MicroBatcher
from sits.understanding.rules_stage import RulesStage
from sits.understanding.tier_selection import DualFactorTierHandler

from sits.understanding.understander import RequestUnderstander

TOY = (
    Domain("greeting", "say hello", ("hello there", "hi how are you", "good morning friend")),
    Domain("weather", "ask about the weather", ("will it rain tomorrow", "how hot is it today", "is it sunny outside")),
)


def _understander(embed=None, timeout_s=1.0, routes=IntentRoutes()) -> RequestUnderstander:
    embedder = CharNgramEmbedder(dim=512)
    classifier = build_intent_classifier(TOY, embedder)
    batcher = MicroBatcher(embed or embedder.embed, max_batch=8, max_wait_s=0.0)
    return RequestUnderstander(RulesStage(load_domains()), DualFactorTierHandler(), routes, classifier, batcher,
                               timeout_s=timeout_s)


async def test_embedding_classifier_decides_when_no_rule_hits():
    u = _understander(routes=IntentRoutes((IntentRoute("weather", model="sky"),)))
    await u.start()
    try:
        result = await u.understand("will it be sunny tomorrow")
    finally:
        await u.aclose()
    assert (result.intent, result.intent_source) == ("weather", "embedding")
    assert 0.5 < result.confidence <= 1.0
    assert result.tier == "tiny" and result.route is not None and result.route.model == "sky"
    assert result.intent_header().startswith("weather; confidence=")


async def test_rules_answer_without_the_classifier():
    calls = []
    u = _understander(embed=lambda texts: calls.append(texts) or np.zeros((len(texts), 512), np.float32))
    await u.start()
    try:
        result = await u.understand("```python\ndef f(): return 1\n```")
    finally:
        await u.aclose()
    assert (result.intent, result.intent_source) == ("coding", "rules") and calls == []


async def test_slow_classifier_falls_back_to_rules_within_the_timeout():
    release = threading.Event()

    returned = threading.Event()

    def slow(texts: Sequence[str]) -> np.ndarray:
        release.wait(2.0)
        returned.set()
        return np.zeros((len(texts), 512), np.float32)

    u = _understander(embed=slow, timeout_s=0.02)
    await u.start()
    try:
        result = await u.understand("will it rain tomorrow")
        answered_before_the_model = not returned.is_set()
    finally:
        release.set()
        await u.aclose()
    assert result.intent_source == "fallback" and result.intent == "general_chat"
    assert answered_before_the_model and u.timeouts == 1


async def test_failing_classifier_falls_back():
    def broken(texts):
        raise RuntimeError("model exploded")

    u = _understander(embed=broken)
    await u.start()
    try:
        result = await u.understand("will it rain tomorrow")
    finally:
        await u.aclose()
    assert result.intent_source == "fallback"


async def test_concurrent_requests_share_batches():
    seen: list[int] = []
    embedder = CharNgramEmbedder(dim=64)

    def embed(texts):
        seen.append(len(texts))
        time.sleep(0.01)  # long enough for the other callers to queue up
        return embedder.embed(texts)

    batcher = MicroBatcher(embed, max_batch=16, max_wait_s=0.002)
    await batcher.start()
    try:
        rows = await asyncio.gather(*(batcher.embed(f"text {i}") for i in range(20)))
    finally:
        await batcher.aclose()
    assert len(rows) == 20 and sum(seen) == 20 and len(seen) < 20
    assert np.allclose(rows[3], embedder.embed(["text 3"])[0])


async def test_batcher_must_be_started():
    with pytest.raises(RuntimeError):
        await MicroBatcher(lambda t: np.zeros((len(t), 1))).embed("x")


def test_classifier_and_batcher_come_together():
    with pytest.raises(ValueError):
        RequestUnderstander(RulesStage(load_domains()), DualFactorTierHandler(), batcher=MicroBatcher(lambda t: t))
