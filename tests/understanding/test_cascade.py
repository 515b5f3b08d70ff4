"""The classifier cascade: the fast head decides when sure, the accurate one below the margin bar."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from sits.configuration.gateway import parse_config
from sits.errors import ConfigError
from sits.understanding.cascade import CascadeStages, IntentCascade, VectorLru
from sits.understanding.domains import Domain, load_domains
from sits.understanding.embedders import CharNgramEmbedder
from sits.understanding.factory import build_intent_parts, build_understander
from sits.understanding.intent_classifier import build_intent_classifier
from sits.understanding.micro_batcher import MicroBatcher
from sits.understanding.rules_stage import RulesStage
from sits.understanding.settings import UnderstandingConfig
from sits.understanding.tier_selection import DualFactorTierHandler
from sits.understanding.understander import RequestUnderstander

TOY = (
    Domain("greeting", "say hello", ("hello there", "hi how are you", "good morning friend")),
    Domain("weather", "ask about the weather", ("will it rain tomorrow", "how hot is it today", "is it sunny outside")),
)
PROMPT = "will it be sunny tomorrow"


class CountingEmbedder:
    """A second, different char-n-gram embedder standing in for the accurate model; counts its calls."""

    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        self._inner = CharNgramEmbedder(dim=256, ngrams=(2, 3, 4))
        self.name, self.dim = "accurate", self._inner.dim
        self.calls: list[list[str]] = []
        self._delay_s, self._fail = delay_s, fail
        self.armed = False  # delays and failures start once the classifier is built
        self.release = threading.Event()
        self.finished = 0  # armed calls that returned (a caller that waited for a delayed one saw it finish)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if self.armed and self._delay_s:
            self.release.wait(self._delay_s)
        if self.armed and self._fail:
            raise RuntimeError("accurate model exploded")
        self.finished += self.armed
        return self._inner.embed(texts)


def _stages(min_margin: float, accurate: CountingEmbedder) -> CascadeStages:
    fast = CharNgramEmbedder(dim=512)
    # The classifiers are built before the accurate embedder's calls are counted.
    accurate_head = build_intent_classifier(TOY, accurate)
    accurate.calls.clear()
    accurate.armed = True
    return CascadeStages(build_intent_classifier(TOY, fast), fast, accurate_head, accurate, min_margin)


def _understander(stages: CascadeStages, fast_embed=None, timeout_s: float | None = 1.0,
                  cache_entries: int = 0) -> RequestUnderstander:
    cascade = IntentCascade(stages, MicroBatcher(fast_embed or stages.fast_embedder.embed, max_wait_s=0.0),
                            MicroBatcher(stages.accurate_embedder.embed, max_wait_s=0.0), cache_entries)
    return RequestUnderstander(RulesStage(load_domains()), DualFactorTierHandler(), timeout_s=timeout_s,
                               cascade=cascade)


def _fast_margin(prompt: str) -> float:
    stages = _stages(0.0, CountingEmbedder())
    vector = stages.fast_embedder.embed([prompt])
    return stages.fast.classify_with_margins(vector)[0][1]


async def _classify(u: RequestUnderstander, *prompts: str):
    await u.start()
    try:
        return [await u.understand(p) for p in prompts]
    finally:
        await u.aclose()


async def test_escalates_only_below_the_margin_bar():
    margin = _fast_margin(PROMPT)
    assert 0.0 < margin < 1.0

    sure = CountingEmbedder()
    [above] = await _classify(u := _understander(_stages(margin - 0.01, sure)), PROMPT)
    assert above.intent_source == "embedding:charngram" and sure.calls == []
    assert (u.cascade.classified, u.cascade.escalations) == (1, 0)

    unsure = CountingEmbedder()
    [below] = await _classify(u := _understander(_stages(margin + 0.01, unsure)), PROMPT)
    assert below.intent_source == "embedding:accurate" and unsure.calls == [[PROMPT]]
    assert below.intent == "weather" and (u.cascade.classified, u.cascade.escalations) == (1, 1)


async def test_rule_hits_skip_both_stages():
    accurate = CountingEmbedder()
    fast_calls: list[Sequence[str]] = []
    stages = _stages(1.0, accurate)
    u = _understander(stages, fast_embed=lambda t: fast_calls.append(t) or stages.fast_embedder.embed(t))
    [hit] = await _classify(u, "```python\ndef f(): return 1\n```")
    assert (hit.intent, hit.intent_source) == ("coding", "rules")
    assert fast_calls == [] and accurate.calls == []


async def test_slow_fast_stage_falls_back_to_the_rules():
    release = threading.Event()

    returned = threading.Event()

    def slow(texts: Sequence[str]) -> np.ndarray:
        release.wait(2.0)
        returned.set()
        return np.zeros((len(texts), 512), np.float32)

    u = _understander(_stages(1.0, CountingEmbedder()), fast_embed=slow, timeout_s=0.02)
    await u.start()
    try:
        result = await u.understand(PROMPT)
        answered_before_the_model = not returned.is_set()
    finally:
        release.set()
        await u.aclose()
    assert (result.intent_source, result.intent) == ("fallback", "general_chat")
    assert answered_before_the_model and u.timeouts == 1


async def test_slow_escalation_keeps_the_fast_answer_within_the_deadline():
    accurate = CountingEmbedder(delay_s=2.0)
    u = _understander(_stages(1.0, accurate), timeout_s=0.05)
    await u.start()
    try:
        result = await u.understand(PROMPT)
        finished_before = accurate.finished
    finally:
        accurate.release.set()
        await u.aclose()
    assert (result.intent, result.intent_source) == ("weather", "embedding:charngram")
    assert accurate.calls == [[PROMPT]] and finished_before == 0  # escalated, and not waited for
    assert u.cascade.escalation_timeouts == 1 and u.timeouts == 0


async def test_failing_escalation_keeps_the_fast_answer():
    u = _understander(_stages(1.0, CountingEmbedder(fail=True)))
    [result] = await _classify(u, PROMPT)
    assert (result.intent, result.intent_source) == ("weather", "embedding:charngram")
    assert u.cascade.escalation_timeouts == 1


async def test_repeated_prompts_reuse_the_accurate_vector():
    accurate = CountingEmbedder()
    u = _understander(_stages(1.0, accurate), cache_entries=4)
    first, second = await _classify(u, PROMPT, PROMPT)
    assert first == second and first.intent_source == "embedding:accurate"
    assert accurate.calls == [[PROMPT]] and u.cascade.cache_hits == 1


def test_vector_lru_is_bounded():
    lru = VectorLru(2)
    for i in range(3):
        lru.put(f"p{i}", np.full(2, i, np.float32))
    assert lru.get("p0") is None and lru.get("p2")[0] == 2
    assert VectorLru(0).get("p0") is None


def test_offline_cascade_embeds_only_the_unsure_prompts():
    accurate = CountingEmbedder()
    sure = "hello there good morning friend"
    unsure_margin, sure_margin = _fast_margin(PROMPT), _fast_margin(sure)
    assert unsure_margin < sure_margin
    stages = _stages((unsure_margin + sure_margin) / 2, accurate)
    guesses = stages.classify_offline([PROMPT, sure])
    assert [g.source for g in guesses] == ["embedding:accurate", "embedding:charngram"]
    assert accurate.calls == [[PROMPT]]


async def test_factory_builds_the_cascade_with_the_real_accurate_model():
    config = UnderstandingConfig(embedder="cascade", cascade={"min_margin": 1.0})  # always escalate: e5 answers
    u = build_understander(config, TOY, timeout_s=None)
    assert u.cascade is not None and u.cascade.stages.accurate.embedder_name == "e5"
    [result] = await _classify(u, PROMPT)
    assert (result.intent, result.intent_source) == ("weather", "embedding:e5")
    parts = build_intent_parts(UnderstandingConfig(embedder="cascade", cascade={"min_margin": 0.0}), TOY)
    assert parts.cascade is not None and parts.classify_offline([PROMPT])[0].source == "embedding:charngram"


def understanding_config(raw):
    return parse_config({"understanding": raw}).understanding


@pytest.mark.parametrize(("raw", "field"), [
    ({"embedder": "e5", "cascade": {"min_margin": 0.3}}, "understanding.cascade: 'cascade' is set but 'embedder'"),
    ({"embedder": "cascade", "cascade": {"fast": "e5", "accurate": "e5"}}, "understanding.cascade:"),
    ({"embedder": "cascade", "cascade": {"min_margin": 1.5}}, "understanding.cascade.min_margin:"),
    ({"embedder": "cascade", "cascade": {"accurate": "bert"}}, "understanding.cascade.accurate:"),
    ({"embedder": "cascade", "cascade": {"threshold": 0.3}}, "understanding.cascade.threshold: unknown key"),
    ({"embedder": "cascade", "cascade": {"cache_entries": -1}}, "understanding.cascade.cache_entries:"),
])
def test_bad_cascade_config_names_the_field(raw, field):
    with pytest.raises(ConfigError) as info:
        understanding_config({"enabled": True, **raw})
    assert field in info.value.message


def test_the_cascade_is_the_default_and_its_section_needs_no_embedder_key():
    assert UnderstandingConfig().embedder == "cascade"
    assert understanding_config({"enabled": True, "cascade": {"min_margin": 0.2}}).cascade.min_margin == 0.2


def test_cascade_config_round_trips():
    cfg = understanding_config({"enabled": True, "embedder": "cascade",
                                "cascade": {"fast": "charngram", "accurate": "e5", "min_margin": 0.25}})
    assert (cfg.cascade.fast, cfg.cascade.accurate, cfg.cascade.min_margin) == ("charngram", "e5", 0.25)
