"""The `workflows:` section of the gateway YAML: strict pydantic at the edge.

A workflow is a short, fixed pipeline: an optional document-parsing step, one generation step
whose branches (model or intent, each with a weight) run in parallel, an optional verification
step, and an aggregation step that picks the answer and its confidence. A budget bounds the
whole run in wall time and in estimated cost.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

PositiveFloat = Annotated[float, Field(gt=0)]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
StepName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
WORKFLOW_PREFIX = "workflow:"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelRef(_Strict):
    """Where one call goes: a configured model (or alias, or `auto`), or an intent that the
    `understanding.routes` map to a model."""

    model: Annotated[str, Field(min_length=1)] | None = None
    intent: Annotated[str, Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _one_target(self) -> ModelRef:
        if (self.model is None) == (self.intent is None):
            raise ValueError("give exactly one of 'model' or 'intent'")
        if self.model is not None and self.model.startswith(WORKFLOW_PREFIX):
            raise ValueError("a workflow step cannot call another workflow")
        return self


class Branch(ModelRef):
    weight: PositiveFloat = 1.0


class ParseDocumentStep(_Strict):
    """Text and tables of every attached file, given to the generators as structured context."""

    kind: Literal["parse_document"]
    name: StepName = "parse"
    max_context_chars: Annotated[int, Field(ge=1000)] = 60_000  # document context beyond this is cut (and said so)


class GenerateStep(_Strict):
    """Parallel branches, each one chat call through the director (scheduling, fallback, cache)."""

    kind: Literal["generate"]
    name: StepName = "generate"
    branches: Annotated[list[Branch], Field(min_length=1, max_length=16)]
    instructions: str | None = None  # a system message put before the client's messages
    max_tokens: Annotated[int, Field(ge=1)] | None = None  # else the client's, else the model's default
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None


class JudgeRef(ModelRef):
    max_tokens: Annotated[int, Field(ge=1)] = 64


class VerifyStep(_Strict):
    """SymbolicGuard (numbers, dates and stated arithmetic against the source) and/or an LLM judge."""

    kind: Literal["verify"]
    name: StepName = "verify"
    symbolic: bool = True
    judge: JudgeRef | None = None

    @model_validator(mode="after")
    def _something(self) -> VerifyStep:
        if not self.symbolic and self.judge is None:
            raise ValueError("a verify step needs 'symbolic: true' or a 'judge'")
        return self


class AggregateStep(_Strict):
    kind: Literal["aggregate"]
    name: StepName = "aggregate"
    method: Literal["weighted_vote", "best_of_n", "panel_judge"]
    judge: JudgeRef | None = None  # panel_judge: the model that picks the best candidate

    @model_validator(mode="after")
    def _judge(self) -> AggregateStep:
        if (self.method == "panel_judge") != (self.judge is not None):
            raise ValueError("'judge' is required with method panel_judge and only allowed there")
        return self


Step = Annotated[ParseDocumentStep | GenerateStep | VerifyStep | AggregateStep, Field(discriminator="kind")]
_ORDER = {"parse_document": 0, "generate": 1, "verify": 2, "aggregate": 3}


class Budget(_Strict):
    max_latency_s: PositiveFloat | None = None  # the whole workflow; late branches are cancelled
    max_cost_usd: Annotated[float, Field(ge=0)] | None = None  # estimated from the models' cost_per_1k_*


class Calibration(_Strict):
    """A monotone map raw score -> probability: (raw, calibrated) points, linearly interpolated."""

    points: Annotated[list[tuple[Unit, Unit]], Field(min_length=2)]

    @model_validator(mode="after")
    def _monotone(self) -> Calibration:
        xs = [p[0] for p in self.points]
        ys = [p[1] for p in self.points]
        if xs != sorted(xs) or len(set(xs)) != len(xs):
            raise ValueError("points must have strictly increasing raw scores")
        if ys != sorted(ys):
            raise ValueError("calibrated values must not decrease")
        return self


class WorkflowSpec(_Strict):
    description: str = ""
    steps: Annotated[list[Step], Field(min_length=1)]
    budget: Budget = Budget()
    calibration: Calibration | None = None  # None: the packaged map fitted by bench/bench_calibration.py

    @model_validator(mode="after")
    def _shape(self) -> WorkflowSpec:
        kinds = [s.kind for s in self.steps]
        for kind in _ORDER:
            if kinds.count(kind) > 1:
                raise ValueError(f"at most one '{kind}' step")
        if "generate" not in kinds:
            raise ValueError("a workflow needs a 'generate' step")
        if [_ORDER[k] for k in kinds] != sorted(_ORDER[k] for k in kinds):
            raise ValueError("steps must come in the order parse_document, generate, verify, aggregate")
        names = [s.name for s in self.steps]
        if len(set(names)) != len(names):
            raise ValueError("step names must be unique")
        aggregate = self.aggregate
        if aggregate is not None and aggregate.method == "best_of_n" and self.verify is None:
            raise ValueError("best_of_n ranks by verifier score: add a 'verify' step")
        return self

    @property
    def parse(self) -> ParseDocumentStep | None:
        return next((s for s in self.steps if isinstance(s, ParseDocumentStep)), None)

    @property
    def generate(self) -> GenerateStep:
        return next(s for s in self.steps if isinstance(s, GenerateStep))

    @property
    def verify(self) -> VerifyStep | None:
        return next((s for s in self.steps if isinstance(s, VerifyStep)), None)

    @property
    def aggregate(self) -> AggregateStep | None:
        return next((s for s in self.steps if isinstance(s, AggregateStep)), None)

    def model_refs(self) -> list[tuple[str, ModelRef]]:
        """Every model reference with its config path below the workflow, for startup checks."""
        refs: list[tuple[str, ModelRef]] = []
        for i, step in enumerate(self.steps):
            if isinstance(step, GenerateStep):
                refs += [(f"steps[{i}].branches[{j}]", b) for j, b in enumerate(step.branches)]
            elif isinstance(step, (VerifyStep, AggregateStep)) and step.judge is not None:
                refs.append((f"steps[{i}].judge", step.judge))
        return refs


WorkflowName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


class WorkflowsConfig(RootModel[dict[WorkflowName, WorkflowSpec]]):
    model_config = ConfigDict(frozen=True)


class AttachmentLimits(_Strict):
    """The `attachments:` section: what files a request (or an upload) may carry."""

    max_file_bytes: Annotated[int, Field(ge=1024)] = 5 * 1024 * 1024
    max_files: Annotated[int, Field(ge=1, le=64)] = 8
    max_pages: Annotated[int, Field(ge=1)] = 200
    upload_store_bytes: Annotated[int, Field(ge=1024)] = 256 * 1024 * 1024  # uploaded files kept in memory
    upload_ttl_s: PositiveFloat = 3600.0
