"""Request bodies of the OpenAI endpoints, validated at the edge.

Every model allows extra fields: unknown fields are forwarded to the upstream
unchanged (and reported), never dropped. Declared fields are type-checked so a
wrong type gets a 422 that names the field, before any upstream is called.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

from sits.errors import ClientError, InvalidRequest, UnprocessableRequest

Number = StrictFloat  # strict floats still accept ints
TokenIds = list[StrictInt]
T = TypeVar("T", bound=BaseModel)


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class ChatMessage(_Open):
    role: Literal["system", "user", "assistant", "tool", "developer", "function"]
    content: StrictStr | list[dict[str, Any]] | None = None
    name: StrictStr | None = None


class StreamOptions(_Open):
    include_usage: StrictBool | None = None


class _Generation(_Open):
    model: Annotated[StrictStr, Field(min_length=1)]
    stream: StrictBool | None = None
    stream_options: StreamOptions | None = None
    max_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    temperature: Annotated[Number, Field(ge=0, le=2)] | None = None
    top_p: Annotated[Number, Field(ge=0, le=1)] | None = None
    n: Annotated[StrictInt, Field(ge=1)] | None = None
    stop: StrictStr | list[StrictStr] | None = None
    seed: StrictInt | None = None
    presence_penalty: Annotated[Number, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[Number, Field(ge=-2, le=2)] | None = None
    logit_bias: dict[str, Number] | None = None
    user: StrictStr | None = None


class ChatCompletionBody(_Generation):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = None
    parallel_tool_calls: StrictBool | None = None

    def prompt_text(self) -> str:
        parts = []
        for m in self.messages:
            if isinstance(m.content, str):
                parts.append(m.content)
            elif m.content:
                parts.extend(str(p.get("text", "")) for p in m.content if isinstance(p, dict))
        return "\n".join(parts)


class CompletionBody(_Generation):
    prompt: StrictStr | list[StrictStr] | TokenIds | list[TokenIds]
    echo: StrictBool | None = None
    best_of: StrictInt | None = None
    suffix: StrictStr | None = None
    logprobs: StrictInt | None = None

    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n".join(p for p in self.prompt if isinstance(p, str))


class EmbeddingBody(_Open):
    model: Annotated[StrictStr, Field(min_length=1)]
    input: StrictStr | list[StrictStr] | TokenIds | list[TokenIds]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: Annotated[StrictInt, Field(ge=1)] | None = None
    user: StrictStr | None = None


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
    if not loc and kind in ("model_type", "model_attributes_type", "dataclass_type"):
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
