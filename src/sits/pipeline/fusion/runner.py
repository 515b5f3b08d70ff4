"""The workflow runner: parse the attached documents, draft in parallel branches, verify, aggregate.

Every model call goes through the director (`step_call.call_model`), so a step is scheduled,
admitted, retried and failed over exactly like a client's request. The budget bounds the run:
branches still out when `max_latency_s` is spent are cancelled and the run goes on with the
drafts it has; a call whose worst-case cost would pass `max_cost_usd` is not made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from sits.errors import InvalidRequest, ModelNotFound, SitsError, UnprocessableRequest, UpstreamTimeout
from sits.pipeline.context import RoutingRequest
from sits.pipeline.fusion import aggregation, prompts
from sits.pipeline.fusion.aggregation import Candidate, Choice
from sits.pipeline.fusion.attachments import collect_attachments
from sits.pipeline.fusion.calibration import CalibrationMap
from sits.pipeline.fusion.documents import DocumentParser, ParsedDocument
from sits.pipeline.fusion.result import StepRecord, WorkflowResult
from sits.pipeline.fusion.source_facts import SourceFacts
from sits.pipeline.fusion.spec import (
    WORKFLOW_PREFIX,
    AttachmentLimits,
    GenerateStep,
    JudgeRef,
    ModelRef,
    VerifyStep,
    WorkflowSpec,
)
from sits.pipeline.fusion.step_call import CHAT, CallAnswer, StepDirector, actual_cost, call_model, estimate_cost
from sits.pipeline.fusion.symbolic_guard import SymbolicGuard
from sits.pipeline.fusion.uploads import UploadStore
from sits.state.routing_table import RoutingTable
from sits.telemetry.tracing import end_span
from sits.understanding.intent_routes import IntentRoute

# Client fields a generation step inherits unless the step sets its own.
_INHERITED = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop", "presence_penalty",
              "frequency_penalty")


@dataclass
class _Run:
    """One run's mutable bookkeeping; lives for one request."""

    name: str
    spec: WorkflowSpec
    request: RoutingRequest
    started: float
    clock: Callable[[], float]
    steps: list[StepRecord] = field(default_factory=list)
    cost: float = 0.0  # spent, or reserved for calls still out
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def remaining(self) -> float | None:
        limit = self.spec.budget.max_latency_s
        return None if limit is None else max(0.0, self.started + limit - self.clock())

    def affordable(self, estimate: float) -> bool:
        limit = self.spec.budget.max_cost_usd
        return limit is None or self.cost + estimate <= limit + 1e-12

    def ms_since(self, t0: float) -> float:
        return (self.clock() - t0) * 1000


class WorkflowRunner:
    def __init__(self, workflows: Mapping[str, WorkflowSpec], intent_models: Mapping[str, str],
                 director: StepDirector, table: Callable[[], RoutingTable], parser: DocumentParser,
                 uploads: UploadStore, limits: AttachmentLimits, clock: Callable[[], float],
                 wall: Callable[[], float], default_calibration: CalibrationMap) -> None:
        self._workflows = workflows
        self._intent_models = intent_models
        self._director = director
        self._table = table
        self._parser = parser
        self._uploads = uploads
        self._limits = limits
        self._clock = clock
        self._wall = wall
        self._default_calibration = default_calibration
        self._guard = SymbolicGuard()
        self._live_steps: set[str] = set()  # request ids of step calls in flight

    # -- what the director asks ------------------------------------------------

    @staticmethod
    def workflow_of(model: str) -> str | None:
        return model[len(WORKFLOW_PREFIX):] if model.startswith(WORKFLOW_PREFIX) else None

    def route_target(self, route: IntentRoute, request: RoutingRequest) -> str | None:
        """The workflow an intent route names (`workflow: x` or `model: workflow:x`), unless the
        request is itself a step of a workflow (a step with model `auto` must not start another)."""
        if request.request_id in self._live_steps:
            return None
        return route.workflow or (self.workflow_of(route.model) if route.model else None)

    def catalogue(self) -> list[tuple[str, str]]:
        """(model name, description) of every workflow, for /v1/models."""
        return [(WORKFLOW_PREFIX + name, spec.description) for name, spec in self._workflows.items()]

    # -- one run -------------------------------------------------------------------

    async def run(self, name: str, request: RoutingRequest, body: bytes, intent: str = "") -> WorkflowResult:
        spec = self._workflows.get(name)
        if spec is None:
            known = ", ".join(WORKFLOW_PREFIX + n for n in self._workflows) or "(none configured)"
            raise ModelNotFound(f"The workflow '{name}' does not exist. Available workflows: {known}", param="model")
        if request.api != CHAT:
            raise InvalidRequest(f"workflow '{name}' answers /v1/chat/completions only", param="model")
        chat = orjson.loads(body)
        run = _Run(name, spec, request, self._clock(), self._clock)
        messages = chat["messages"]
        with _step_span(run, "parse"):
            rendered, documents = await self._parse(run, messages)
        source_text = "\n\n".join([*rendered.values(), prompts.client_text(messages)])
        step = spec.generate
        with _step_span(run, "generate"):
            drafts = await self._generate(run, step, prompts.with_documents(messages, rendered, step.instructions),
                                          chat)
        ask = prompts.question(messages)
        if spec.verify is not None:
            with _step_span(run, "verify"):
                source = await asyncio.to_thread(  # every quantity of every page: regex work, off the loop
                    SourceFacts.build,
                    "\n".join([prompts.client_text(messages), *(p for d in documents for p in d.pages)]),
                    tuple(t for d in documents for t in d.tables)) if spec.verify.symbolic else SourceFacts.build("")
                drafts = await self._verify(run, spec.verify, drafts, source, source_text, ask)
        with _step_span(run, "aggregate"):
            choice = await self._aggregate(run, drafts, source_text, ask)
        calibration = CalibrationMap.from_points(spec.calibration.points) if spec.calibration else (
            self._default_calibration if spec.verify is not None and spec.verify.symbolic else CalibrationMap.identity())
        chosen = choice.candidate
        verdict = chosen.verdict
        return WorkflowResult(
            workflow=name, content=chosen.content, finish_reason=chosen.finish_reason,
            confidence=min(1.0, max(0.0, calibration(choice.raw_confidence))), raw_confidence=choice.raw_confidence,
            method=choice.method, method_detail=choice.detail, chosen_branch=chosen.branch, chosen_model=chosen.model,
            steps=tuple(run.steps), findings=verdict.findings if verdict else (),
            verifier_summary=verdict.summary() if verdict else "", prompt_tokens=run.prompt_tokens,
            completion_tokens=run.completion_tokens, cost_usd=run.cost, elapsed_ms=run.ms_since(run.started),
            max_latency_s=spec.budget.max_latency_s, max_cost_usd=spec.budget.max_cost_usd, created=int(self._wall()),
            intent=intent)

    async def _parse(self, run: _Run, messages: list[Any]) -> tuple[dict[str, str], list[ParsedDocument]]:
        step = run.spec.parse
        if step is None:
            return {}, []
        t0 = self._clock()
        attachments = collect_attachments(messages, self._uploads, self._limits)
        if not attachments:
            run.steps.append(StepRecord(step.name, step.kind, "skipped", 0.0, detail="no attached files"))
            return {}, []
        documents = [await self._parser.parse(a) for a in attachments]
        share = step.max_context_chars // len(documents)
        rendered = {a.param.split(".file.")[0]: d.render(share) for a, d in zip(attachments, documents, strict=True)}
        detail = "; ".join(d.describe() + (f" (parsed in {d.parse_ms:.0f} ms)" if d.parse_ms else " (cached)")
                           for d in documents)
        run.steps.append(StepRecord(step.name, step.kind, "ok", run.ms_since(t0), detail=detail))
        return rendered, documents

    async def _generate(self, run: _Run, step: GenerateStep, messages: list[dict[str, Any]],
                        chat: dict[str, Any]) -> list[Candidate]:
        params = {k: chat[k] for k in _INHERITED if chat.get(k) is not None}
        if step.max_tokens is not None:
            params.pop("max_completion_tokens", None)
            params["max_tokens"] = step.max_tokens
        if step.temperature is not None:
            params["temperature"] = step.temperature
        max_tokens = params.get("max_tokens") or params.get("max_completion_tokens")
        prompt_chars = len(orjson.dumps(messages))
        table = self._table()
        calls: dict[asyncio.Task[tuple[CallAnswer, float]], tuple[int, str, float]] = {}
        skipped: list[tuple[int, str, float]] = []
        order = sorted(range(len(step.branches)), key=lambda i: -step.branches[i].weight)  # heavier first for budget
        try:
            for i in order:
                branch = step.branches[i]
                model = self._model_of(branch)
                estimate = estimate_cost(table, model, prompt_chars, max_tokens)
                if not run.affordable(estimate):
                    skipped.append((i, model, estimate))
                    continue
                run.cost += estimate
                task = asyncio.create_task(self._timed(run, f"{step.name}.{i}", model, messages, params))
                calls[task] = (i, model, estimate)
            if not calls:
                cheapest = min(skipped, key=lambda s: s[2])
                raise UnprocessableRequest(
                    f"workflow '{run.name}': no draft fits the cost budget of ${run.spec.budget.max_cost_usd}; the "
                    f"cheapest ({cheapest[1]}) is estimated at ${cheapest[2]:.6f}", param="model",
                    code="workflow_budget_exceeded")
            done, pending = await asyncio.wait(calls, timeout=run.remaining())
        finally:
            for task in calls:
                if not task.done():
                    task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        candidates, errors = [], []
        for task, (i, model, estimate) in sorted(calls.items(), key=lambda kv: kv[1][0]):
            weight = step.branches[i].weight
            run.cost -= estimate
            if task in pending:
                run.steps.append(StepRecord(step.name, step.kind, "timeout", run.ms_since(run.started), model=model,
                                            branch=i, weight=weight, detail="cancelled: latency budget spent"))
                continue
            error = task.exception()
            if error is not None:
                if not isinstance(error, SitsError):
                    raise error
                errors.append(error)
                run.steps.append(StepRecord(step.name, step.kind, "error", 0.0, model=model, branch=i, weight=weight,
                                            detail=f"{error.code}: {error.message}"[:300]))
                continue
            answer, latency_ms = task.result()
            cost = self._account(run, answer)
            run.steps.append(StepRecord(step.name, step.kind, "ok", latency_ms, model=answer.model,
                                        endpoint=answer.endpoint, branch=i, weight=weight,
                                        detail=f"finish={answer.finish_reason}", prompt_tokens=answer.prompt_tokens,
                                        completion_tokens=answer.completion_tokens, cost_usd=cost))
            candidates.append(Candidate(i, answer.model, answer.content, weight, finish_reason=answer.finish_reason))
        for i, model, estimate in skipped:
            run.steps.append(StepRecord(step.name, step.kind, "skipped", 0.0, model=model, branch=i,
                                        weight=step.branches[i].weight,
                                        detail=f"cost budget: estimated ${estimate:.6f} would exceed it"))
        if candidates:
            return candidates
        if errors:
            raise errors[-1]
        raise UpstreamTimeout(f"workflow '{run.name}' spent its latency budget of "
                              f"{run.spec.budget.max_latency_s:g}s before any draft was ready")

    async def _verify(self, run: _Run, step: VerifyStep, drafts: list[Candidate], source: SourceFacts,
                      source_text: str, ask: str) -> list[Candidate]:
        checked = []
        for c in drafts:
            if step.symbolic:
                t0 = self._clock()
                verdict = await asyncio.to_thread(self._guard.check, c.content, source)  # regex work, off the loop
                run.steps.append(StepRecord(step.name, "verify", "ok", run.ms_since(t0), model="symbolic-guard",
                                            branch=c.branch, score=verdict.score, detail=verdict.summary()))
                c = replace(c, verdict=verdict)
            checked.append(c)
        if step.judge is None:
            return checked
        judge = step.judge
        replies = await asyncio.gather(*(
            self._judge_call(run, step.name, f"{step.name}.judge.{c.branch}", judge,
                             prompts.verify_judge_messages(source_text, ask, c.content), c.branch)
            for c in checked))
        return [replace(c, judge_score=prompts.read_verdict(r) if r is not None else None)
                for c, r in zip(checked, replies, strict=True)]

    async def _aggregate(self, run: _Run, drafts: list[Candidate], source_text: str, ask: str) -> Choice:
        step = run.spec.aggregate
        t0 = self._clock()
        if step is None:
            choice = aggregation.single(drafts[0]) if len(drafts) == 1 else (
                aggregation.best_of_n(drafts) if run.spec.verify is not None else aggregation.weighted_vote(drafts))
            return choice
        if step.method == "weighted_vote":
            choice = aggregation.weighted_vote(drafts)
        elif step.method == "best_of_n":
            choice = aggregation.best_of_n(drafts)
        else:
            assert step.judge is not None
            reply = await self._judge_call(run, step.name, f"{step.name}.judge", step.judge,
                                           prompts.panel_judge_messages(source_text, ask, [d.content for d in drafts]))
            choice = aggregation.judged(drafts, prompts.read_pick(reply, len(drafts)) if reply is not None else None)
        run.steps.append(StepRecord(step.name, step.kind, "ok", run.ms_since(t0), branch=choice.candidate.branch,
                                    score=choice.raw_confidence, detail=choice.detail))
        return choice

    async def _judge_call(self, run: _Run, step_name: str, call_id: str, judge: JudgeRef,
                          messages: list[dict[str, Any]], branch: int | None = None) -> str | None:
        """A judge's reply, or None (recorded) when it failed, ran out of time or would break the budget."""
        model = self._model_of(judge)
        estimate = estimate_cost(self._table(), model, len(orjson.dumps(messages)), judge.max_tokens)
        remaining = run.remaining()
        if remaining is not None and remaining <= 0 or not run.affordable(estimate):
            why = "latency budget spent" if remaining is not None and remaining <= 0 else "cost budget"
            run.steps.append(StepRecord(step_name, "judge", "skipped", 0.0, model=model, branch=branch, detail=why))
            return None
        run.cost += estimate
        try:
            async with asyncio.timeout(remaining):
                answer, latency_ms = await self._timed(run, call_id, model, messages,
                                                       {"max_tokens": judge.max_tokens, "temperature": 0})
        except TimeoutError:
            run.steps.append(StepRecord(step_name, "judge", "timeout", 0.0, model=model, branch=branch,
                                        detail="cancelled: latency budget spent"))
            return None
        except SitsError as error:
            run.steps.append(StepRecord(step_name, "judge", "error", 0.0, model=model, branch=branch,
                                        detail=f"{error.code}: {error.message}"[:300]))
            return None
        finally:
            run.cost -= estimate
        cost = self._account(run, answer)
        run.steps.append(StepRecord(step_name, "judge", "ok", latency_ms, model=answer.model, endpoint=answer.endpoint,
                                    branch=branch, detail=answer.content.strip()[:200],
                                    prompt_tokens=answer.prompt_tokens, completion_tokens=answer.completion_tokens,
                                    cost_usd=cost))
        return answer.content

    async def _timed(self, run: _Run, call_id: str, model: str, messages: list[dict[str, Any]],
                     params: dict[str, Any]) -> tuple[CallAnswer, float]:
        request_id = f"{run.request.request_id}~{call_id}"
        self._live_steps.add(request_id)
        t0 = self._clock()
        trace = run.request.trace
        span = trace.stage("workflow.call", {"sits.workflow": run.name, "sits.workflow.call": call_id,
                                             "gen_ai.request.model": model})
        parent = run.request._replace(trace=trace.within(span))
        try:
            answer = await call_model(self._director, parent, request_id, model, messages, params)
        except BaseException as exc:
            end_span(span, getattr(exc, "message", None) or type(exc).__name__)
            raise
        finally:
            self._live_steps.discard(request_id)
        end_span(span, attributes={"gen_ai.response.model": answer.model, "sits.endpoint": answer.endpoint})
        return answer, run.ms_since(t0)

    def _account(self, run: _Run, answer: CallAnswer) -> float:
        cost = actual_cost(self._table(), answer.model, answer.prompt_tokens, answer.completion_tokens)
        run.cost += cost
        run.prompt_tokens += answer.prompt_tokens
        run.completion_tokens += answer.completion_tokens
        return cost

    def _model_of(self, ref: ModelRef) -> str:
        if ref.model is not None:
            return ref.model
        assert ref.intent is not None
        return self._intent_models[ref.intent]


@contextmanager
def _step_span(run: _Run, name: str) -> Iterator[None]:
    """A `sits.workflow.<name>` span around one stage of a run (when the request is traced)."""
    trace = run.request.trace
    span = trace.stage(f"workflow.{name}", {"sits.workflow": run.name})
    try:
        yield
    except BaseException as exc:
        end_span(span, getattr(exc, "message", None) or type(exc).__name__)
        raise
    end_span(span)
