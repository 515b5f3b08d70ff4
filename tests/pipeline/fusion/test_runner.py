"""The runner's own rules, with a stand-in director (the e2e tests run the real one): what a step
call looks like, how budgets end branches, when a run fails, and that a step never starts a workflow."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import orjson
import pytest

from sits.errors import SitsError, UnprocessableRequest, UpstreamStatusError, UpstreamTimeout
from sits.pipeline.canned_answer import CannedAnswer
from sits.pipeline.context import RoutingRequest
from sits.pipeline.fusion.calibration import CalibrationMap
from sits.pipeline.fusion.documents import DocumentParser
from sits.pipeline.fusion.runner import WorkflowRunner
from sits.pipeline.fusion.spec import AttachmentLimits, WorkflowsConfig
from sits.pipeline.fusion.uploads import UploadStore
from sits.state.routing_table import ModelEntry, RoutingTable
from sits.state.semantic_cache import CachedCompletion, CacheHit
from sits.understanding.intent_routes import IntentRoute

Reply = Callable[[RoutingRequest, dict[str, Any]], Any]


class StandInDirector:
    """Answers each step call with `reply(request, body)`: text, a SitsError to raise, or a delay."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.calls: list[tuple[RoutingRequest, dict[str, Any]]] = []

    async def run(self, request: RoutingRequest, body: bytes) -> CannedAnswer:
        payload = orjson.loads(body)
        self.calls.append((request, payload))
        answer = self.reply(request, payload)
        if isinstance(answer, SitsError):
            raise answer
        if isinstance(answer, float):
            await asyncio.sleep(answer)
            answer = "late"
        completion = CachedCompletion(kind="chat", model=request.model, content=answer, finish_reason="stop",
                                      created=0)
        return CannedAnswer(CacheHit(completion, "exact", 1.0), request.model, "test")

    def remember(self, exchange: Any, completion: Any) -> None:
        raise AssertionError("canned answers are never remembered")


def runner(spec: dict[str, Any], director: StandInDirector, prices: dict[str, float] | None = None) -> WorkflowRunner:
    workflows = WorkflowsConfig.model_validate({"w": spec}).root
    models = {name: ModelEntry(name, (), cost_per_1k_output=(prices or {}).get(name)) for name in ("a", "b", "c")}
    table = RoutingTable(MappingProxyType(models))
    limits = AttachmentLimits()
    return WorkflowRunner(workflows, {"finance": "c"}, director, lambda: table, DocumentParser(10),
                          UploadStore(1 << 20, 60, lambda: 0.0, lambda: 0.0), limits, asyncio.get_running_loop().time,
                          lambda: 1_700_000_000.0, CalibrationMap.identity())


def request(model: str = "workflow:w", request_id: str = "req-1") -> RoutingRequest:
    return RoutingRequest(api="/chat/completions", model=model, stream=False, request_id=request_id,
                          prompt_text="q", priority=0, cache_scope="tenant-x")


def body(**extra: Any) -> bytes:
    return orjson.dumps({"model": "workflow:w", "messages": [{"role": "user", "content": "Revenue is 1,540,000?"}],
                         **extra})


async def test_step_calls_are_plain_chat_requests_with_the_parents_priority_and_scope():
    director = StandInDirector(lambda r, b: "Revenue is 1,540,000.")
    spec = {"steps": [{"kind": "generate", "instructions": "Be exact.", "temperature": 0.1,
                       "branches": [{"model": "a"}, {"intent": "finance"}]}, {"kind": "verify"}]}
    result = await runner(spec, director).run("w", request(), body(max_tokens=50, seed=3, tools=[{"x": 1}]))
    (first, payload), (second, _) = sorted(director.calls, key=lambda c: c[0].request_id)
    assert (first.model, second.model) == ("a", "c")  # the intent maps to its routed model
    assert first.request_id == "req-1~generate.0" and first.priority == 0 and first.cache_scope == "tenant-x"
    assert payload == {"model": "a", "messages": [{"role": "system", "content": "Be exact."},
                                                  {"role": "user", "content": "Revenue is 1,540,000?"}],
                       "max_tokens": 50, "temperature": 0.1, "seed": 3, "stream": False}
    assert result.method == "best_of_n" and result.confidence == 1.0 and result.verifier_summary.endswith("=0")


async def test_no_affordable_draft_is_a_clear_422():
    director = StandInDirector(lambda r, b: "x")
    spec = {"steps": [{"kind": "generate", "max_tokens": 1000, "branches": [{"model": "a"}, {"model": "b"}]}],
            "budget": {"max_cost_usd": 0.001}}
    with pytest.raises(UnprocessableRequest, match="no draft fits the cost budget") as info:
        await runner(spec, director, prices={"a": 0.01, "b": 0.02}).run("w", request(), body())
    assert info.value.code == "workflow_budget_exceeded" and director.calls == []


async def test_every_branch_failing_raises_the_directors_error():
    boom = UpstreamStatusError("upstream said 500", upstream_status=500)
    director = StandInDirector(lambda r, b: boom)
    spec = {"steps": [{"kind": "generate", "branches": [{"model": "a"}, {"model": "b"}]}]}
    with pytest.raises(UpstreamStatusError, match="upstream said 500"):
        await runner(spec, director).run("w", request(), body())


async def test_latency_budget_spent_before_any_draft_is_504():
    director = StandInDirector(lambda r, b: 5.0)
    spec = {"steps": [{"kind": "generate", "branches": [{"model": "a"}]}], "budget": {"max_latency_s": 0.05}}
    with pytest.raises(UpstreamTimeout, match="latency budget of 0.05s"):
        await runner(spec, director).run("w", request(), body())


async def test_one_failed_branch_is_recorded_and_the_run_goes_on():
    director = StandInDirector(lambda r, b: UpstreamTimeout("slow") if r.model == "a" else "ok")
    spec = {"steps": [{"kind": "generate", "branches": [{"model": "a", "weight": 5}, {"model": "b"}]}]}
    result = await runner(spec, director).run("w", request(), body())
    assert result.content == "ok" and result.chosen_model == "b"
    assert [(s.model, s.status) for s in result.steps] == [("a", "error"), ("b", "ok")]
    assert result.steps[0].detail == "upstream_timeout: slow"


async def test_a_step_never_starts_a_workflow():
    route = IntentRoute("finance", model="workflow:w")
    seen: list[str | None] = []
    holder: dict[str, WorkflowRunner] = {}

    def reply(r: RoutingRequest, b: dict[str, Any]) -> str:
        seen.append(holder["flows"].route_target(route, r))  # what the director asks for this step's "auto"
        return "x"

    flows = holder["flows"] = runner({"steps": [{"kind": "generate", "branches": [{"model": "auto"}]}]},
                                     StandInDirector(reply))
    assert flows.route_target(route, request("auto", "client-1")) == "w"
    assert flows.route_target(IntentRoute("finance", workflow="w"), request("auto", "client-1")) == "w"
    await flows.run("w", request(), body())
    assert seen == [None]
