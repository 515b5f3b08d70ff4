"""An answer the gateway gives without an upstream exchange: a cache hit or the static template
(an `Answer`, pipeline/answer.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from sits.pipeline.answer import JSON
from sits.pipeline.made_answer import push_all, replay
from sits.pipeline.cached_response import cache_header, kind_of, render_completion, render_sse
from sits.state.semantic_cache import CachedCompletion, CacheHit


@dataclass(frozen=True, slots=True)
class CannedAnswer:
    hit: CacheHit
    model: str  # the model the request was for
    route: str
    attempts: str = ""
    intent: str = ""
    request_id: str = ""  # names the rendered completion (`chatcmpl-cache-<id>`)

    # An answer the gateway made: no upstream byte to time, nothing new to store.
    first_byte_at = None
    cache_key = None
    content_type = JSON

    @property
    def source(self) -> str:
        return "static-template" if self.hit.match == "static" else "cache"

    @property
    def header(self) -> tuple[bytes, bytes]:
        if self.hit.match == "static":
            return b"x-sits-fallback", b"static-template"
        return cache_header(self.hit)

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"x-sits-model", self.model.encode()), self.header,
                   (b"x-sits-route", self.route.encode("latin-1", "replace")),
                   (b"x-sits-attempts", self.attempts.encode("latin-1", "replace"))]
        if self.intent:
            headers.append((b"x-sits-intent", self.intent.encode("latin-1", "replace")))
        return headers

    def usage(self, body: bytes, parsed: object = None) -> tuple[int, int] | None:
        return None  # no upstream tokens were spent on it

    async def read(self) -> bytes:
        return render_completion(self.hit, self.request_id)

    def chunks(self, include_usage: bool = False) -> AsyncIterator[bytes]:
        return replay(render_sse(self.hit, self.request_id, include_usage=include_usage))

    def push(self, deliver: Callable[[bytes], bool], include_usage: bool = False) -> Awaitable[None]:
        return push_all(self.chunks(include_usage), deliver)

    def resume_reading(self) -> None:
        pass

    def close(self, ok: bool = False) -> None:
        pass


def static_answer(api: str, text: str, model: str) -> CacheHit | None:
    """The configured static template, for the APIs that have an answer shape for it."""
    kind = kind_of(api)
    if kind is None:
        return None
    completion = CachedCompletion(kind=kind, model=model, content=text, finish_reason="stop", created=0)
    return CacheHit(completion, "static", 0.0)
