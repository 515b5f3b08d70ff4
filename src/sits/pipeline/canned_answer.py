"""An answer the gateway gives without an upstream exchange: a cache hit or the static template."""

from __future__ import annotations

from dataclasses import dataclass

from sits.pipeline.cached_response import cache_header, kind_of
from sits.state.semantic_cache import CachedCompletion, CacheHit


@dataclass(frozen=True, slots=True)
class CannedAnswer:
    hit: CacheHit
    model: str  # the model the request was for
    route: str
    attempts: str = ""
    intent: str = ""

    @property
    def header(self) -> tuple[bytes, bytes]:
        if self.hit.match == "static":
            return b"x-sits-fallback", b"static-template"
        return cache_header(self.hit)


def static_answer(api: str, text: str, model: str) -> CacheHit | None:
    """The configured static template, for the APIs that have an answer shape for it."""
    kind = kind_of(api)
    if kind is None:
        return None
    completion = CachedCompletion(kind=kind, model=model, content=text, finish_reason="stop", created=0)
    return CacheHit(completion, "static", 0.0)
