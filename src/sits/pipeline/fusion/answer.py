"""A fusion workflow's result as the doors consume it (an `Answer`, pipeline/answer.py): a chat
completion with the `sits` extension (docs/workflows.md) and the workflow's x-sits-* headers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from sits.pipeline.answer import JSON
from sits.pipeline.made_answer import push_all, replay
from sits.pipeline.fusion import render
from sits.pipeline.fusion.result import WorkflowResult


class WorkflowAnswer:
    __slots__ = ("result", "request_id", "model", "route", "intent")

    # No upstream byte to time, no attempts of its own to report, nothing for the cache steps.
    source = "workflow"
    attempts = ""
    first_byte_at = None
    cache_key = None
    content_type = JSON

    def __init__(self, result: WorkflowResult, request_id: str) -> None:
        self.result = result
        self.request_id = request_id
        self.model = result.model
        self.route = result.route()
        self.intent = result.intent

    def headers(self) -> list[tuple[bytes, bytes]]:
        return render.headers(self.result)

    def usage(self, body: bytes, parsed: object = None) -> tuple[int, int] | None:
        return self.result.prompt_tokens, self.result.completion_tokens  # every step's tokens

    async def read(self) -> bytes:
        return render.render_json(self.result, self.request_id)

    def chunks(self, include_usage: bool = False) -> AsyncIterator[bytes]:
        return replay(render.render_sse(self.result, self.request_id, include_usage))

    def push(self, deliver: Callable[[bytes], bool], include_usage: bool = False) -> Awaitable[None]:
        return push_all(self.chunks(include_usage), deliver)

    def resume_reading(self) -> None:
        pass

    def close(self, ok: bool = False) -> None:
        pass
