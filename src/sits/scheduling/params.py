"""The base of every plugin's parameter model: strict, unknown keys rejected, immutable."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class PluginParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class NoParams(PluginParams):
    """For plugins that take no parameters; still rejects any key given."""
