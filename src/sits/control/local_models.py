"""Config's local models as the specs the local worker pool runs."""

from __future__ import annotations

from collections.abc import Sequence

from sits.backends.local.model_files import LocalModelSpec
from sits.control.config import ModelConfig


def local_model_specs(models: Sequence[ModelConfig]) -> list[LocalModelSpec]:
    return [
        LocalModelSpec(m.name, m.tier or "base", m.local.gguf, m.local.prompt_format, m.local.n_ctx, m.local.threads)
        for m in models
        if m.local is not None
    ]
