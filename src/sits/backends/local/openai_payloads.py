"""The exact OpenAI JSON shapes a worker answers with, for one completion id.

These dicts are the worker's HTTP edge (they are serialised at once), so they
follow the OpenAI wire format field for field rather than a SITS type.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from sits.errors import SitsError

Api = Literal["chat", "text"]
JSON = dict[str, Any]


def usage(prompt_tokens: int, completion_tokens: int) -> JSON:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


@dataclass(frozen=True, slots=True)
class CompletionShape:
    """Builds every payload of one response: same id, created time and model."""

    api: Api
    model: str
    id: str = field(default="")
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.id:
            prefix = "chatcmpl" if self.api == "chat" else "cmpl"
            object.__setattr__(self, "id", f"{prefix}-{uuid.uuid4().hex}")

    def _envelope(self, chunk: bool) -> JSON:
        if self.api == "chat":
            kind = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def complete(self, text: str, finish_reason: str, prompt_tokens: int, completion_tokens: int) -> JSON:
        if self.api == "chat":
            choice: JSON = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return {
            **self._envelope(chunk=False),
            "choices": [choice],
            "usage": usage(prompt_tokens, completion_tokens),
        }

    def chunk(
        self, text: str | None, *, finish_reason: str | None = None, role: bool = False,
        with_usage_field: bool = False,
    ) -> JSON:
        if self.api == "chat":
            delta: JSON = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice: JSON = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        body = {**self._envelope(chunk=True), "choices": [choice]}
        if with_usage_field:
            # OpenAI sends "usage": null on every chunk but the last when usage is asked for
            body["usage"] = None
        return body

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> JSON:
        return {
            **self._envelope(chunk=True),
            "choices": [],
            "usage": usage(prompt_tokens, completion_tokens),
        }


def sse(payload: JSON) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def error_payload(error: SitsError) -> JSON:
    return {
        "error": {
            "message": error.message,
            "type": error.error_type,
            "param": error.param,
            "code": error.code,
        }
    }
