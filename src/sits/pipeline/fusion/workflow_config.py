"""Startup checks that need more than the schema: every model a workflow names exists, every
intent it names has a model route, and every intent route to a workflow names a real one."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from sits.errors import ConfigError
from sits.pipeline.fusion.spec import WORKFLOW_PREFIX, WorkflowSpec
from sits.understanding.settings import UnderstandingConfig

AUTO = "auto"


def intent_models(understanding: UnderstandingConfig) -> dict[str, str]:
    """intent -> model from the `understanding.routes` that name a model (the first rule wins)."""
    found: dict[str, str] = {}
    for route in understanding.routes:
        if route.model is not None and not route.model.startswith(WORKFLOW_PREFIX):
            found.setdefault(route.intent, route.model)
    return found


def check_workflows(workflows: Mapping[str, WorkflowSpec], models: Collection[str],
                    understanding: UnderstandingConfig) -> dict[str, str]:
    """Raise ConfigError naming the offending key; return the intent -> model map the runner uses."""
    routes = intent_models(understanding)
    errors = []
    for name, spec in workflows.items():
        for path, ref in spec.model_refs():
            where = f"workflows.{name}.{path}"
            if ref.model is not None and ref.model not in models and ref.model != AUTO:
                errors.append(f"{where}.model: unknown model {ref.model!r}")
            if ref.intent is not None and ref.intent not in routes:
                errors.append(f"{where}.intent: no understanding.routes entry sends intent {ref.intent!r} to a model")
    for i, route in enumerate(understanding.routes):
        target = route.workflow or (route.model[len(WORKFLOW_PREFIX):] if route.model and
                                    route.model.startswith(WORKFLOW_PREFIX) else None)
        if target is not None and target not in workflows:
            key = "workflow" if route.workflow else "model"
            errors.append(f"understanding.routes[{i}].{key}: unknown workflow {target!r}")
    if errors:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(errors))
    return routes
