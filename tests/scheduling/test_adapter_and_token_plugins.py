"""adapter-affinity-scorer and the context-window filter's exact counts."""

from __future__ import annotations

import random

from sits.scheduling.plugins.adapter_affinity_scorer import AdapterAffinityScorer
from sits.scheduling.plugins.context_window_filter import ContextWindowFilter
from sits.scheduling.policy import default_profile
from sits.scheduling.registry import builtin_plugins
from sits.scheduling.types import EndpointView, SchedulingRequest


def ep(i: str, **kw) -> EndpointView:
    return EndpointView(i, "m", 1.0, True, kw.pop("in_flight", 0), 0.1, **kw)


def test_holders_of_the_adapter_score_one_and_nobody_else_does():
    request = SchedulingRequest("m", "/chat/completions", False, adapter_endpoints=frozenset({"b"}))
    assert AdapterAffinityScorer().score(request, [ep("a"), ep("b"), ep("c")]) == [0.0, 1.0, 0.0]
    plain = SchedulingRequest("m", "/chat/completions", False)
    assert AdapterAffinityScorer().score(plain, [ep("a"), ep("b")]) == [0.0, 0.0]


def test_the_default_profile_sends_adapter_requests_to_a_holder_even_when_it_is_busier():
    profile = default_profile(builtin_plugins())
    busy_holder = ep("holder", in_flight=9, kv_cache_usage=0.9, queue_depth=5)
    idle = ep("idle", in_flight=0, kv_cache_usage=0.0)
    for seed in range(20):
        request = SchedulingRequest("m", "/chat/completions", False, prefix_hash=random.Random(seed).getrandbits(64),
                                    adapter_endpoints=frozenset({"holder"}))
        decision = profile.run(request, [idle, busy_holder], random.Random(seed))
        assert decision.candidates[0].id == "holder"
        assert [c.id for c in decision.candidates] == ["holder", "idle"]  # the other stays as failover
    plain = SchedulingRequest("m", "/chat/completions", False)
    assert profile.run(plain, [idle, busy_holder], random.Random(0)).candidates[0].id == "idle"


class Counting:
    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return self.tokens


def test_the_exact_count_decides_near_the_window_edge():
    small, large = ep("small", context_window=1000), ep("large", context_window=4000)
    exact = Counting(1100)  # the text is denser than len/4 says
    request = SchedulingRequest("m", "/chat/completions", False, prompt_tokens_estimate=900,
                                count_prompt_tokens=exact)
    assert [e.id for e in ContextWindowFilter().filter(request, [small, large], random.Random(0))] == ["large"]
    assert exact.calls == 1
    sparse = Counting(700)
    request = SchedulingRequest("m", "/chat/completions", False, prompt_tokens_estimate=1050,
                                count_prompt_tokens=sparse)
    assert [e.id for e in ContextWindowFilter().filter(request, [small, large], random.Random(0))] == ["small", "large"]


def test_far_from_any_window_the_estimate_decides_and_nothing_is_counted():
    never = Counting(10**9)
    request = SchedulingRequest("m", "/chat/completions", False, prompt_tokens_estimate=100, count_prompt_tokens=never)
    kept = ContextWindowFilter().filter(request, [ep("a", context_window=8000), ep("b")], random.Random(0))
    assert len(kept) == 2 and never.calls == 0
    without = SchedulingRequest("m", "/chat/completions", False, prompt_tokens_estimate=990)
    assert len(ContextWindowFilter().filter(without, [ep("a", context_window=1000)], random.Random(0))) == 1
