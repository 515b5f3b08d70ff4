"""Prices and cost: per million tokens by kind (cached input and reasoning priced as such), from a
model's or an endpoint's `price:`, from `cost_per_1k_*`, and from runtime registration; the cost of
answers over a real gateway; cache hits and the static answer cost nothing and are recorded so."""

from __future__ import annotations

import aiohttp
import pytest

from sits.configuration.gateway import parse_config
from sits.control.registry_records import records_from_config
from sits.control.table_builder import build_routing_table
from sits.errors import ConfigError
from sits.tenants.pricing import PriceBook, cost_usd, usage_from
from sits.tenants.records import Price, Usage
from tests.tenants.conftest import Keys, Spend, client, tenant_config

PRICE = Price(input=3.0, cached_input=0.3, output=15.0, reasoning=20.0)


def test_cached_and_reasoning_tokens_are_priced_as_such() -> None:
    usage = Usage(input_tokens=1000, cached_input_tokens=400, output_tokens=500, reasoning_tokens=200)
    assert cost_usd(PRICE, usage) == pytest.approx((600 * 3 + 400 * 0.3 + 300 * 15 + 200 * 20) / 1e6)
    # unset kinds fall back: cached input as input, reasoning as output
    assert cost_usd(Price(input=3.0, output=15.0), usage) == pytest.approx((1000 * 3 + 500 * 15) / 1e6)
    assert cost_usd(None, usage) == 0.0


def test_usage_by_kind_is_read_from_the_answer() -> None:
    payload = (b'{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":500,"total_tokens":1500,'
               b'"prompt_tokens_details":{"cached_tokens":400},"completion_tokens_details":{"reasoning_tokens":200}}}')
    assert usage_from(payload) == Usage(1000, 400, 500, 200)
    assert usage_from(b'{"usage":{"prompt_tokens":7,"completion_tokens":2}}') == Usage(7, 0, 2, 0)
    assert usage_from(b'{"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}') == Usage(7, 0, 2, 0)
    assert usage_from(b'{"choices":[]}') is None
    # with details, those are read, whatever the (prompt, completion) counts given say
    detailed = (b'{"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9,'
                b'"prompt_tokens_details":{"cached_tokens":5}}}')
    assert usage_from(detailed, (7, 2)) == Usage(7, 5, 2, 0)
    assert usage_from(b'{"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}', (7, 2)) == Usage(7, 0, 2, 0)
    # `_details"` in the answer's text, before the usage, is not the usage's: the counts given are used
    texted = b'{"choices":[{"message":{"content":"see the_details"}}],"usage":{"prompt_tokens":7,"completion_tokens":2}}'
    assert usage_from(texted, (70, 20)) == Usage(70, 0, 20, 0)


def test_prices_in_config_per_million_per_thousand_and_per_endpoint() -> None:
    config = parse_config({"models": [
        {"name": "a", "price": {"input": 3, "output": 15, "cached_input": 0.3},
         "endpoints": [{"url": "http://h:1/v1"}, {"url": "http://h:2/v1", "price": {"input": 1, "output": 2}}]},
        {"name": "b", "cost_per_1k_input": 0.002, "cost_per_1k_output": 0.004, "endpoints": [{"url": "http://h:3/v1"}]},
    ], "aliases": {"alias-a": "a"}})
    table = build_routing_table(records_from_config(config.models, {}), config.all_aliases(), {})
    book = PriceBook()
    assert book.served(table, "a/ep-0") == Price(3.0, 0.3, 15.0, None)
    assert book.served(table, "a/ep-1") == Price(1.0, None, 2.0, None)  # the endpoint's own price wins
    assert book.served(table, "b/ep-0") == Price(input=2.0, output=4.0)  # per thousand = the same price
    assert book.served(table, "cache") is None
    # a reservation uses the dearest of a model's endpoints, per kind; auto, the dearest of the table
    assert book.estimate(table, "a") == Price(3.0, 1.0, 15.0, 15.0) == book.estimate(table, "alias-a")
    assert book.estimate(table, "auto") == Price(3.0, 2.0, 15.0, 15.0)
    assert table.models["a"].cost_per_1k_input == pytest.approx(0.003)  # scorers still see per-thousand costs
    with pytest.raises(ConfigError, match=r"models\[0\].*give either 'price'"):
        parse_config({"models": [{"name": "a", "price": {"input": 1}, "cost_per_1k_input": 0.1,
                                  "endpoints": [{"url": "http://h:1/v1"}]}]})
    with pytest.raises(ConfigError, match=r"models\[0\]\.price\.input"):
        parse_config({"models": [{"name": "a", "price": {"input": -1}, "endpoints": [{"url": "http://h:1/v1"}]}]})


async def test_cost_of_answers_with_cached_and_reasoning_tokens_and_registered_prices(usage_upstream,
                                                                                     tenant_gateway):
    usage_upstream.usage.update(prompt_tokens_details={"cached_tokens": 400},
                                completion_tokens_details={"reasoning_tokens": 200})
    keys, spend = Keys(), Spend()
    keys.add("sk-p", "key_p")
    raw = tenant_config(usage_upstream.url)
    raw["control"] = {"allow_loopback": True}
    gateway = await tenant_gateway(raw, keys, spend, secrets={"SITS_ADMIN_KEY": "admin"})
    async with client(gateway, "sk-p") as c:
        await c.chat.completions.create(model="m1", messages=[{"role": "user", "content": "hi"}])
        await c.chat.completions.create(model="fast", messages=[{"role": "user", "content": "hi"}])
    # a model registered at runtime with its price, and a bad price refused naming the field
    base = f"http://127.0.0.1:{gateway.bound_port}"
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer admin"}) as s:
        async with s.post(base + "/v1/models/register", json={
                "name": "reg", "endpoint": usage_upstream.url,
                "price": {"input": 1.0, "cached_input": 0.5, "output": 4.0, "reasoning": 8.0}}) as r:
            assert r.status in (200, 201), await r.text()
        async with s.post(base + "/v1/models/register", json={
                "name": "bad", "endpoint": usage_upstream.url, "price": {"input": "cheap"}}) as r:
            assert 400 <= r.status < 500 and "price.input" in await r.text()
    async with client(gateway, "sk-p") as c:
        await c.chat.completions.create(model="reg", messages=[{"role": "user", "content": "hi"}])
    records = await spend.wait_for(3)
    by_model = {r.model: r for r in records}
    assert by_model["m1"].usage == Usage(1000, 400, 500, 200)
    assert by_model["m1"].cost_usd == pytest.approx((600 * 3 + 400 * 0.3 + 300 * 15 + 200 * 20) / 1e6)
    assert by_model["m2"].cost_usd == pytest.approx(1000 * 1.0 / 1e6)  # cost_per_1k_input 0.001 = $1/M
    assert by_model["reg"].cost_usd == pytest.approx((600 * 1 + 400 * 0.5 + 300 * 4 + 200 * 8) / 1e6)
    assert not any(r.cache_hit for r in records)


async def test_cache_hits_and_the_static_answer_cost_nothing(usage_upstream, tenant_gateway):
    keys, spend = Keys(), Spend()
    keys.add("sk-c", "key_c")
    raw = tenant_config(usage_upstream.url)
    raw["semantic_cache"] = {"enabled": True, "threshold": 1.0}
    raw["models"][0]["cache"] = True
    raw["resilience"] = {"static_answer": "We are busy; try again soon.", "max_attempts": 1}
    gateway = await tenant_gateway(raw, keys, spend)
    ask = {"model": "m1", "messages": [{"role": "user", "content": "same question"}], "temperature": 0}
    async with client(gateway, "sk-c") as c:
        first = await c.chat.completions.with_raw_response.create(**ask)
        second = await c.chat.completions.with_raw_response.create(**ask)
        assert second.headers["x-sits-cache"].startswith("hit")
        await usage_upstream.stop()  # every endpoint down: the static answer
        third = await c.chat.completions.with_raw_response.create(
            model="m1", messages=[{"role": "user", "content": "another question"}], temperature=0)
        assert third.headers.get("x-sits-fallback") == "static-template"
    assert first.http_response.status_code == 200
    records = await spend.wait_for(3)
    assert usage_upstream.requests == 1
    assert records[0].cost_usd > 0 and not records[0].cache_hit
    assert (records[1].endpoint, records[1].cost_usd, records[1].cache_hit) == ("cache", 0.0, True)
    assert (records[2].endpoint, records[2].cost_usd, records[2].cache_hit) == ("static-template", 0.0, True)
