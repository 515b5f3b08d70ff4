"""The director on its own: its stages in order over real state (stats, health, breakers, the scheduler)
and a backend the test writes, so each path is checked without HTTP."""

from __future__ import annotations

import random
from types import MappingProxyType
from typing import Any

import pytest

from sits.errors import ModelNotFound, Overloaded, UpstreamStatusError
from sits.pipeline.cache_step import CacheStep
from sits.pipeline.context import RoutingRequest
from sits.pipeline.director import Director
from sits.pipeline.fallback import FallbackPolicy
from sits.scheduling.policy import DEFAULT_POLICY, build_scheduler
from sits.state.circuit_breaker import CircuitBreakers
from sits.state.endpoint_health import HealthBoard
from sits.state.endpoint_stats import StatsStore
from sits.state.retry_budget import RetryBudget
from sits.state.routing_table import Endpoint, ModelEntry, RoutingTable
from sits.state.semantic_cache import SemanticCacheConfig


def model(name: str, tier: str | None = None, replicas: int = 1, fallbacks: tuple[str, ...] = ()) -> ModelEntry:
    return ModelEntry(name, tuple(Endpoint(f"{name}/ep-{i}", name, name, "http", "127.0.0.1", 1, "/v1")
                                  for i in range(replicas)), tier=tier, fallbacks=fallbacks)


class Backend:
    """Answers per endpoint id: an exception to raise, else a stand-in response."""

    def __init__(self, **failing: BaseException) -> None:
        self.failing = {k.replace("_", "/", 1): v for k, v in failing.items()}
        self.sent: list[tuple[str, bytes]] = []

    async def send(self, endpoint: Endpoint, api: bytes, body: bytes, request_id: str,
                   trace_headers: bytes = b"") -> Any:
        self.sent.append((endpoint.id, body))
        error = self.failing.get(endpoint.id)
        if error is not None:
            raise error
        return object()


def director(table: RoutingTable, backend: Backend, static: str | None = None) -> Director:
    return Director(lambda: table, build_scheduler(DEFAULT_POLICY), backend, StatsStore(), HealthBoard(),  # type: ignore[arg-type]
                    CircuitBreakers(), RetryBudget(), FallbackPolicy(), CacheStep(SemanticCacheConfig(), static),
                    None, lambda: None, lambda: 100.0, random.Random(0))


def request(model_name: str, prompt: str = "hi") -> RoutingRequest:
    return RoutingRequest("/chat/completions", model_name, False, "rid", prompt)


def table(*models: ModelEntry, aliases: dict[str, str] | None = None) -> RoutingTable:
    return RoutingTable(MappingProxyType({m.name: m for m in models}), MappingProxyType(aliases or {}))


async def test_a_named_model_is_sent_with_the_body_as_given():
    backend = Backend()
    exchange = await director(table(model("m")), backend).run(request("m"), b'{"model":"m"}')
    assert (exchange.model, exchange.endpoint.id, exchange.attempts) == ("m", "m/ep-0", "m/ep-0:ok")
    assert exchange.route == "profile=default; pick=m/ep-0; reason=only endpoint"
    assert backend.sent == [("m/ep-0", b'{"model":"m"}')]


async def test_an_alias_reaches_its_model_with_the_upstream_name_in_the_body():
    backend = Backend()
    exchange = await director(table(model("m"), aliases={"fast": "m"}), backend).run(
        request("fast"), b'{"model":"fast","x":1}')
    assert exchange.model == "m"
    assert backend.sent == [("m/ep-0", b'{"model":"m","x":1}')]  # only `model` changes


async def test_an_unknown_model_lists_what_exists():
    with pytest.raises(ModelNotFound) as info:
        await director(table(model("a"), model("b")), Backend()).run(request("c"), b'{"model":"c"}')
    assert "Available models: a, b" in info.value.message and info.value.param == "model"


async def test_auto_resolves_to_a_tier_and_says_why():
    backend = Backend()
    exchange = await director(table(model("small", "tiny"), model("big", "heavy")), backend).run(
        request("auto", "hi"), b'{"model":"auto"}')
    assert exchange.model == "small"
    assert "; auto=tier tiny: " in exchange.route and "tier=tiny" in exchange.route


async def test_a_failing_model_moves_to_its_fallback_and_the_route_says_so():
    backend = Backend(**{"a_ep-0": UpstreamStatusError("HTTP 500", upstream_status=500)})
    exchange = await director(table(model("a", fallbacks=("b",)), model("b")), backend).run(
        request("a"), b'{"model":"a"}')
    assert exchange.model == "b" and exchange.route.endswith("; fallback=b")
    assert exchange.attempts == "a/ep-0:upstream_bad_status,b/ep-0:ok"


async def test_when_nothing_answers_the_static_template_is_the_last_step():
    failing = {"a_ep-0": UpstreamStatusError("HTTP 503", upstream_status=503)}
    answer = await director(table(model("a")), Backend(**failing), static="Busy, retry soon.").run(
        request("a"), b'{"model":"a"}')
    assert answer.hit.completion.content == "Busy, retry soon."  # type: ignore[union-attr]
    with pytest.raises(UpstreamStatusError):
        await director(table(model("a")), Backend(**failing)).run(request("a"), b'{"model":"a"}')


async def test_an_unreachable_model_is_no_capacity():
    from sits.errors import UpstreamConnectError

    backend = Backend(**{"a_ep-0": UpstreamConnectError("refused")})
    with pytest.raises(Overloaded) as info:
        await director(table(model("a")), backend).run(request("a"), b'{"model":"a"}')
    assert ("retry-after", "1") in info.value.headers
