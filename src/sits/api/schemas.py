"""Request bodies of the OpenAI endpoints (and the control plane's), validated at the edge.

Every model allows extra fields: unknown fields are forwarded to the upstream
unchanged (and reported), never dropped. Declared fields are type-checked so a
wrong type gets a 422 that names the field, before any upstream is called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter,
                      ValidationError, with_config)
from typing_extensions import NotRequired, TypedDict

from sits.api.body_fields import NO_NEEDS, chat_needs, chat_prompt_text, completion_prompt_text
from sits.errors import ClientError, InvalidRequest, UnprocessableRequest

Number = StrictFloat  # strict floats still accept ints
TokenIds = list[StrictInt]
T = TypeVar("T", bound=BaseModel)
B = TypeVar("B", bound=Mapping[str, Any])


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


class BodySchema(Generic[B]):
    """A data-plane body validated into a plain dict (typed by a TypedDict).

    Plain dicts rather than pydantic models: the gateway reads a few keys, and building a model instance
    costs more on every request (figures: bench/README.md, "measured")."""

    def __init__(self, typed: type[B], prompt_text: Callable[[B], str],
                 needs: Callable[[B], frozenset[str]] = lambda body: NO_NEEDS) -> None:
        self._adapter: TypeAdapter[B] = TypeAdapter(typed)
        self.known = typed.__required_keys__ | typed.__optional_keys__
        self._required = len(typed.__required_keys__)
        self.prompt_text = prompt_text
        self.needs = needs  # what the request needs of a model (the scheduler's capability filter)

    def parse(self, body: bytes) -> B:
        """Validate a JSON body; raise a ClientError naming the first offending field."""
        if not body:
            raise InvalidRequest("request body is empty; expected a JSON object", param="body")
        try:
            return self._adapter.validate_json(body)
        except ValidationError as exc:
            raise _client_error(exc) from None

    def unknown_fields(self, body: Mapping[str, Any]) -> list[str]:
        """Fields SITS does not declare (forwarded unchanged)."""
        # A valid body with no more fields than the required ones has only those.
        return [name for name in body if name not in self.known] if len(body) > self._required else []


CHAT_COMPLETION = BodySchema(ChatCompletionBody, chat_prompt_text, chat_needs)
COMPLETION = BodySchema(CompletionBody, completion_prompt_text)
EMBEDDING = BodySchema(EmbeddingBody, lambda body: "")


def parse_body(schema: type[T], body: bytes) -> T:
    """Validate a JSON body; raise a ClientError naming the first offending field."""
    if not body:
        raise InvalidRequest("request body is empty; expected a JSON object", param="body")
    try:
        return schema.model_validate_json(body)
    except ValidationError as exc:
        raise _client_error(exc) from None


def _client_error(exc: ValidationError) -> ClientError:
    first = exc.errors(include_url=False)[0]
    kind, loc, msg = first["type"], first["loc"], first["msg"]
    if kind == "json_invalid":
        return InvalidRequest(f"request body is not valid JSON: {first.get('ctx', {}).get('error', msg)}",
                              param="body", code="invalid_json")
    if not loc and kind in ("model_type", "model_attributes_type", "dataclass_type", "dict_type"):
        return InvalidRequest("request body must be a JSON object", param="body", code="invalid_json")
    if not loc:
        return UnprocessableRequest(str(msg).removeprefix("Value error, "), param=None, code="invalid_value")
    param = _param_path(loc)
    if kind == "extra_forbidden":
        return UnprocessableRequest(f"unknown field '{param}'", param=param, code="unknown_parameter")
    if kind == "missing":
        return UnprocessableRequest(f"missing required field '{param}'", param=param, code="missing_required_parameter")
    return UnprocessableRequest(f"invalid value for '{param}': {msg}", param=param, code="invalid_type")


def _param_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("str", "list[dict[str,any]]", "list[int]", "list[str]", "list[list[int]]", "int", "float",
                      "function-after[str]") or "[" in part or part.startswith("constrained"):
            continue  # union-branch labels pydantic inserts: not a field name
        else:
            path += f".{part}" if path else part
    return path
