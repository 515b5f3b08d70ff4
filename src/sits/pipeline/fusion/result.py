"""What a workflow run produced: the answer, its confidence, and what every step did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sits.pipeline.fusion.symbolic_guard import Finding

StepStatus = Literal["ok", "error", "timeout", "skipped"]


@dataclass(frozen=True, slots=True)
class StepRecord:
    name: str
    kind: str
    status: StepStatus
    latency_ms: float
    model: str | None = None
    endpoint: str | None = None
    branch: int | None = None
    weight: float | None = None
    score: float | None = None
    detail: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "status": self.status,
                               "latency_ms": round(self.latency_ms, 1)}
        for key in ("model", "endpoint", "branch", "weight", "score"):
            value = getattr(self, key)
            if value is not None:
                out[key] = round(value, 4) if isinstance(value, float) else value
        if self.detail:
            out["detail"] = self.detail
        if self.prompt_tokens or self.completion_tokens:
            out["usage"] = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}
        if self.cost_usd:
            out["cost_usd"] = round(self.cost_usd, 6)
        return out


@dataclass(frozen=True, slots=True)
class WorkflowResult:
    workflow: str
    content: str
    finish_reason: str
    confidence: float  # calibrated, in [0, 1]
    raw_confidence: float
    method: str  # how the answer was chosen
    method_detail: str
    chosen_branch: int
    chosen_model: str
    steps: tuple[StepRecord, ...]
    findings: tuple[Finding, ...]  # the chosen draft's verifier findings
    verifier_summary: str  # "" when no symbolic verifier ran
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    elapsed_ms: float
    max_latency_s: float | None
    max_cost_usd: float | None
    created: int
    intent: str = ""  # x-sits-intent, when an intent route led here

    @property
    def model(self) -> str:
        return "workflow:" + self.workflow

    def extension(self) -> dict[str, Any]:
        """The `sits` object added to the completion (OpenAI SDKs keep it in `model_extra`)."""
        return {
            "workflow": self.workflow,
            "confidence": round(self.confidence, 4),
            "confidence_raw": round(self.raw_confidence, 4),
            "aggregation": {"method": self.method, "chosen_branch": self.chosen_branch, "model": self.chosen_model,
                            "detail": self.method_detail},
            "steps": [s.as_json() for s in self.steps],
            "verifier": {"summary": self.verifier_summary, "findings": [f.as_json() for f in self.findings]},
            "budget": {"max_latency_s": self.max_latency_s, "max_cost_usd": self.max_cost_usd,
                       "elapsed_ms": round(self.elapsed_ms, 1), "cost_usd": round(self.cost_usd, 6)},
        }

    def route(self) -> str:
        drafts = [s for s in self.steps if s.kind == "generate"]
        models = ",".join(f"{s.model or '?'}:{s.status}" for s in drafts)
        return f"workflow={self.workflow}; drafts={models}; {self.method} -> {self.chosen_model}"
