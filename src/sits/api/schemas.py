"""Request bodies of the OpenAI endpoints (and the control plane's), validated at the edge.

Every model allows extra fields: unknown fields are forwarded to the upstream
unchanged (and reported), never dropped. Declared fields are type-checked so a
wrong type gets a 422 that names the field, before any upstream is called.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, with_config
from typing_extensions import NotRequired, TypedDict

from sits.api.body_fields import chat_needs, chat_prompt_text, completion_prompt_text
from sits.api.body_schema import BodySchema

Number = StrictFloat  # strict floats still accept ints
TokenIds = list[StrictInt]


@with_config(ConfigDict(extra="allow"))
class ChatMessage(TypedDict):
    role: Literal["system", "user", "assistant", "tool", "developer", "function"]
    content: NotRequired[StrictStr | list[dict[str, Any]] | None]
    name: NotRequired[StrictStr | None]


@with_config(ConfigDict(extra="allow"))
class StreamOptions(TypedDict):
    include_usage: NotRequired[StrictBool | None]


@with_config(ConfigDict(extra="allow"))
class _Generation(TypedDict):
    model: Annotated[StrictStr, Field(min_length=1)]
    stream: NotRequired[StrictBool | None]
    stream_options: NotRequired[StreamOptions | None]
    max_tokens: NotRequired[Annotated[StrictInt, Field(ge=1)] | None]
    temperature: NotRequired[Annotated[Number, Field(ge=0, le=2)] | None]
    top_p: NotRequired[Annotated[Number, Field(ge=0, le=1)] | None]
    n: NotRequired[Annotated[StrictInt, Field(ge=1)] | None]
    stop: NotRequired[StrictStr | list[StrictStr] | None]
    seed: NotRequired[StrictInt | None]
    presence_penalty: NotRequired[Annotated[Number, Field(ge=-2, le=2)] | None]
    frequency_penalty: NotRequired[Annotated[Number, Field(ge=-2, le=2)] | None]
    logit_bias: NotRequired[dict[str, Number] | None]
    user: NotRequired[StrictStr | None]


@with_config(ConfigDict(extra="allow"))
class ChatCompletionBody(_Generation):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: NotRequired[Annotated[StrictInt, Field(ge=1)] | None]
    tools: NotRequired[list[dict[str, Any]] | None]
    tool_choice: NotRequired[StrictStr | dict[str, Any] | None]
    response_format: NotRequired[dict[str, Any] | None]
    logprobs: NotRequired[StrictBool | None]
    top_logprobs: NotRequired[StrictInt | None]
    parallel_tool_calls: NotRequired[StrictBool | None]


@with_config(ConfigDict(extra="allow"))
class CompletionBody(_Generation):
    prompt: StrictStr | list[StrictStr] | TokenIds | list[TokenIds]
    echo: NotRequired[StrictBool | None]
    best_of: NotRequired[StrictInt | None]
    suffix: NotRequired[StrictStr | None]
    logprobs: NotRequired[StrictInt | None]


@with_config(ConfigDict(extra="allow"))
class EmbeddingBody(TypedDict):
    model: Annotated[StrictStr, Field(min_length=1)]
    input: StrictStr | list[StrictStr] | TokenIds | list[TokenIds]
    encoding_format: NotRequired[Literal["float", "base64"] | None]
    dimensions: NotRequired[Annotated[StrictInt, Field(ge=1)] | None]
    user: NotRequired[StrictStr | None]


CHAT_COMPLETION = BodySchema(ChatCompletionBody, chat_prompt_text, chat_needs)
COMPLETION = BodySchema(CompletionBody, completion_prompt_text)
EMBEDDING = BodySchema(EmbeddingBody, lambda body: "")
