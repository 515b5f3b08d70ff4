"""The worker's HTTP bodies (pydantic, at the edge) and the frozen job they become.

Only the OpenAI fields a llama.cpp worker can honour are modelled; unknown fields
are ignored, as OpenAI-compatible servers commonly do, but a field we model and
cannot honour (n > 1, tools, non-text content) is rejected with its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sits.errors import InvalidRequest

Role = Literal["system", "developer", "user", "assistant", "tool"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ContentPart(_Body):
    type: str
    text: str | None = None


class ChatMessageBody(_Body):
    role: Role
    content: str | list[ContentPart] | None = None

    def text(self, index: int) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        texts: list[str] = []
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise InvalidRequest(
                    f"content part type {part.type!r} is not supported; this model reads text only",
                    param=f"messages.{index}.content",
                    code="unsupported_content",
                )
            texts.append(part.text)
        return "".join(texts)


class StreamOptionsBody(_Body):
    include_usage: bool = False


class _SamplingBody(_Body):
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptionsBody | None = None
    n: int = Field(default=1, ge=1, le=1)

    @field_validator("stop")
    @classmethod
    def _stop_is_short(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else (value or [])
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences are allowed")
        if any(not s for s in stops):
            raise ValueError("stop sequences must be non-empty")
        return value

    def sampling(self, max_tokens: int | None) -> SamplingParams:
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            stop=tuple(stops),
            seed=self.seed,
        )

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ChatCompletionBody(_SamplingBody):
    messages: list[ChatMessageBody] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[object] | None = None

    def job(self) -> GenerationJob:
        if self.tools:
            raise InvalidRequest(
                "this model does not support tools", param="tools", code="unsupported_parameter"
            )
        messages = tuple(
            ChatMessage(role=m.role, content=m.text(i)) for i, m in enumerate(self.messages)
        )
        # max_completion_tokens is the newer name; when both are sent it wins, as at OpenAI
        limit = self.max_completion_tokens or self.max_tokens
        return GenerationJob(messages=messages, prompt=None, params=self.sampling(limit))


class CompletionBody(_SamplingBody):
    prompt: str | list[str]

    def job(self) -> GenerationJob:
        if isinstance(self.prompt, list):
            if len(self.prompt) != 1:
                raise InvalidRequest(
                    "exactly one prompt string per request is supported",
                    param="prompt",
                    code="unsupported_parameter",
                )
            prompt = self.prompt[0]
        else:
            prompt = self.prompt
        return GenerationJob(messages=None, prompt=prompt, params=self.sampling(self.max_tokens))


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int | None
    temperature: float
    top_p: float
    presence_penalty: float
    frequency_penalty: float
    stop: tuple[str, ...]
    seed: int | None


@dataclass(frozen=True, slots=True)
class GenerationJob:
    """Exactly one of messages (chat) or prompt (text completion) is set."""

    messages: tuple[ChatMessage, ...] | None
    prompt: str | None
    params: SamplingParams


B = TypeVar("B", bound=_SamplingBody)


def parse_body(model: type[B], raw: bytes) -> B:
    """Validate a JSON body; the InvalidRequest names the first offending field."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in first["loc"])
        if first["type"] in {"json_invalid", "json_type"}:
            raise InvalidRequest(
                f"request body is not valid JSON: {first['msg']}", code="invalid_json"
            ) from None
        raise InvalidRequest(f"{loc or 'request body'}: {first['msg']}", param=loc or None) from None
