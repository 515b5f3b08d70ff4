"""The `workflows:` section: strict schema, and the startup checks against models and intents."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sits.errors import ConfigError
from sits.pipeline.fusion.spec import WorkflowsConfig
from sits.pipeline.fusion.workflow_config import check_workflows
from sits.understanding.settings import UnderstandingConfig

GENERATE = {"kind": "generate", "branches": [{"model": "m1"}]}


def parse(spec: dict[str, Any]) -> WorkflowsConfig:
    return WorkflowsConfig.model_validate({"w": spec})


def test_a_full_workflow_parses_with_defaults():
    spec = parse({"steps": [{"kind": "parse_document"}, {**GENERATE, "branches": [{"model": "m1", "weight": 2},
                                                                                 {"intent": "finance"}]},
                            {"kind": "verify", "judge": {"model": "m2"}},
                            {"kind": "aggregate", "method": "best_of_n"}],
                  "budget": {"max_latency_s": 20, "max_cost_usd": 0.05},
                  "calibration": {"points": [[0, 0.1], [1, 0.9]]}}).root["w"]
    assert spec.parse is not None and spec.parse.name == "parse"
    assert [b.weight for b in spec.generate.branches] == [2.0, 1.0]
    assert spec.verify is not None and spec.verify.symbolic
    assert [path for path, _ in spec.model_refs()] == ["steps[1].branches[0]", "steps[1].branches[1]",
                                                       "steps[2].judge"]


@pytest.mark.parametrize(("spec", "words"), [
    ({"steps": [{"kind": "verify"}]}, "needs a 'generate' step"),
    ({"steps": [{"kind": "verify"}, GENERATE]}, "must come in the order"),
    ({"steps": [GENERATE, GENERATE]}, "at most one 'generate' step"),
    ({"steps": [{"kind": "generate", "branches": []}]}, "at least 1 item"),
    ({"steps": [{"kind": "generate", "branches": [{"model": "a", "intent": "b"}]}]}, "exactly one of 'model'"),
    ({"steps": [{"kind": "generate", "branches": [{"model": "workflow:x"}]}]}, "cannot call another workflow"),
    ({"steps": [{"kind": "generate", "branches": [{"model": "a", "weight": 0}]}]}, "greater than 0"),
    ({"steps": [GENERATE, {"kind": "aggregate", "method": "panel_judge"}]}, "'judge' is required"),
    ({"steps": [GENERATE, {"kind": "aggregate", "method": "best_of_n"}]}, "add a 'verify' step"),
    ({"steps": [GENERATE, {"kind": "verify", "symbolic": False}]}, "needs 'symbolic: true' or a 'judge'"),
    ({"steps": [GENERATE], "colour": "red"}, "Extra inputs are not permitted"),
    ({"steps": [{"kind": "summarise"}]}, "does not match any of the expected tags"),
    ({"steps": [GENERATE], "calibration": {"points": [[0.5, 0.9], [0.2, 0.1]]}}, "strictly increasing"),
])
def test_bad_specs_are_refused(spec, words):
    with pytest.raises(ValidationError, match=words):
        parse(spec)


def test_workflow_names_are_checked():
    with pytest.raises(ValidationError):
        WorkflowsConfig.model_validate({"bad name!": {"steps": [GENERATE]}})


def test_startup_checks_name_the_offending_key():
    workflows = parse({"steps": [{"kind": "generate", "branches": [{"model": "ghost"}, {"intent": "law"},
                                                                   {"model": "auto"}]}]}).root
    understanding = UnderstandingConfig(enabled=False, routes=[{"intent": "coding", "workflow": "missing"}])
    with pytest.raises(ConfigError) as info:
        check_workflows(workflows, {"m1"}, understanding)
    message = info.value.message
    assert "workflows.w.steps[0].branches[0].model: unknown model 'ghost'" in message
    assert "workflows.w.steps[0].branches[1].intent: no understanding.routes entry sends intent 'law'" in message
    assert "understanding.routes[0].workflow: unknown workflow 'missing'" in message
    assert "branches[2]" not in message  # auto is always there


def test_intents_map_to_their_first_model_route():
    workflows = parse({"steps": [{"kind": "generate", "branches": [{"intent": "law"}]}]}).root
    understanding = UnderstandingConfig(enabled=False, routes=[
        {"intent": "law", "model": "m1"}, {"intent": "law", "model": "m2"}, {"intent": "x", "model": "workflow:w"}])
    assert check_workflows(workflows, {"m1", "m2"}, understanding) == {"law": "m1"}
