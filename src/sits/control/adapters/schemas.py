"""Request bodies of the adapter control API (strict: unknown keys are errors that name the key)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# No ':' in adapter names: `model: "base:adapter"` splits on it.
AdapterName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
Path = Annotated[str, Field(min_length=1, max_length=4096)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class BaseModelDeclaration(_Strict):
    """What adapters of one served model are checked against."""

    model_id: Annotated[str, Field(min_length=1, max_length=256)]  # e.g. "HuggingFaceTB/SmolLM2-135M-Instruct"
    config: Path  # config.json (or its directory) or a .gguf file of the base model
    max_lora_rank: Annotated[int, Field(ge=1, le=1024)] = 16  # the engine's --max-lora-rank
    tokenizer: Path | None = None  # the base's tokenizer.json, to compare an adapter's own tokenizer with


class AdapterRegistration(_Strict):
    """POST /v1/adapters."""

    name: AdapterName
    path: Path  # the PEFT directory as the gateway sees it
    base_model: Annotated[str, Field(min_length=1, max_length=128)]  # a served model's name
    kind: Literal["lora", "qlora", "ia3"] = "lora"
    engine_path: Path | None = None  # the directory as the engines see it (default: `path`)
    dtype: Annotated[str, Field(min_length=1, max_length=16)] | None = None  # e.g. "bfloat16"
    base: BaseModelDeclaration | None = None  # required for the first adapter of a base model


class AdapterActivation(_Strict):
    """POST /v1/adapters/{name}/activate or /deactivate: every endpoint of the base model, or these."""

    endpoints: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = None
