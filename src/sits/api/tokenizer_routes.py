"""Tokenizer bridge inspection (admin key required).

    GET  /v1/tokenizers        loaded families, whether each counts exactly, cross-family coverage
    POST /v1/tokenizers/count  {"model", "text"} -> the exact count with the model's tokenizer
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated

import orjson
from pydantic import BaseModel, ConfigDict, Field

from sits.api.auth import AdminGuard
from sits.api.http_types import HttpRequest, HttpResponse
from sits.api.body_schema import parse_body
from sits.errors import ModelNotFound, UnprocessableRequest
from sits.state.routing_table import RoutingTable
from sits.understanding.tokenizers.catalog import TokenizerCatalog

LIST = "/v1/tokenizers"
COUNT = "/v1/tokenizers/count"


class CountRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    model: Annotated[str, Field(min_length=1, max_length=256)]
    text: Annotated[str, Field(max_length=1_000_000)]


class TokenizerRoutes:
    def __init__(self, catalog: TokenizerCatalog, table: Callable[[], RoutingTable], guard: AdminGuard) -> None:
        self._catalog = catalog
        self._table = table
        self._guard = guard

    async def list_tokenizers(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        bridge = self._catalog.bridge
        families = [{"family": f, "tokens": len(bridge.family(f) or ()), "exact_counts": f in self._catalog.counters}
                    for f in bridge.families()]
        coverage = [{"source": c.source, "target": c.target, "exact": c.exact, "tokens": c.tokens,
                     "share": round(c.share, 4)} for c in bridge.coverage_table()]
        return HttpResponse(200, orjson.dumps({"families": families, "coverage": coverage}))

    async def count(self, request: HttpRequest, request_id: str) -> HttpResponse:
        self._guard.check(request)
        body = parse_body(CountRequest, request.body)
        entry = self._table().resolve(body.model)
        if entry is None:
            raise ModelNotFound(f"the model '{body.model}' does not exist", param="model")
        counter = self._catalog.counter_for(entry.name, entry.tokenizer_family)
        if counter is None:
            raise UnprocessableRequest(f"no tokenizer is loaded for model '{entry.name}' (tokenizer family "
                                       f"{entry.tokenizer_family or entry.name!r})", param="model")
        tokens = await asyncio.to_thread(counter.count, body.text)  # off the event loop: long texts take ms
        return HttpResponse(200, orjson.dumps({"model": entry.name, "family": counter.family, "tokens": tokens}))
