"""The control API against a running gateway: registration contract, security, versions, lifecycle."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import openai
import pytest

from tests.conftest import base_url, one_model_config, sdk

ADMIN = {"SITS_ADMIN_KEY": "admin-secret"}
AUTH = {"Authorization": "Bearer admin-secret"}
FAST_HEALTH = {"health": {"interval_s": 0.1, "timeout_s": 0.5, "unhealthy_threshold": 2}, "allow_loopback": True}


def control_config(upstream_url: str) -> dict[str, Any]:
    return {**one_model_config(upstream_url, name="static"), "control": FAST_HEALTH}


async def call(gateway, method: str, path: str, json: Any = None, headers: dict[str, str] | None = None
               ) -> tuple[int, dict[str, Any], dict[str, str]]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, base_url(gateway) + path, json=json,
                                   headers=AUTH if headers is None else headers) as response:
            return response.status, await response.json(), {k.lower(): v for k, v in response.headers.items()}


def registration(upstream, name: str = "phi-4-finance", **extra: Any) -> dict[str, Any]:
    return {"name": name, "endpoint": f"{upstream.url}/chat/completions",
            "capabilities": ["numerical-reasoning", "regulatory-reporting"], "latency_p95_ms": 210,
            "health_check_path": "/health", **extra}


async def wait_state(gateway, name: str, state: str, index: int = 0, timeout: float = 5.0) -> dict[str, Any]:
    for _ in range(int(timeout / 0.05)):
        status, body, _ = await call(gateway, "GET", f"/v1/models/{name}")
        if status == 200 and body["endpoints"][index]["state"] == state:
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} endpoint {index} never became {state}: {body}")


async def test_register_contract_then_serve(upstream, start_gateway):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    status, body, headers = await call(gateway, "POST", "/v1/models/register", registration(upstream))
    assert status == 201, body
    assert body["registry_version"] == 1 and headers["etag"] == '"1"'
    assert body["capabilities"] == ["numerical-reasoning", "regulatory-reporting"]
    assert body["endpoints"][0]["state"] in ("pending", "ready")
    await wait_state(gateway, "phi-4-finance", "ready")
    answer = await sdk(gateway).chat.completions.create(model="phi-4-finance",
                                                        messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "hello from upstream-a"
    assert upstream.log.health_probes >= 1
    # The probe is a GET of the health path, never a billed completion.
    assert len(upstream.log.requests) == 1


async def test_a_registration_with_labels_and_no_features_loses_no_feature(upstream, start_gateway):
    """The documented example's capability labels once made every tools or JSON request fail with
    model_not_capable: labels are not features, and declaring no features declares no limit."""
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    status, body, _ = await call(gateway, "POST", "/v1/models/register", registration(upstream))
    assert status == 201, body
    await wait_state(gateway, "phi-4-finance", "ready")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    hi = [{"role": "user", "content": "hi"}]
    client = sdk(gateway)
    await client.chat.completions.create(model="phi-4-finance", messages=hi, tools=tools)
    await client.chat.completions.create(model="phi-4-finance", messages=hi, response_format={"type": "json_object"})
    assert len(upstream.log.requests) == 2


async def test_declared_features_limit_what_a_registered_model_takes(upstream, start_gateway):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    status, body, _ = await call(gateway, "POST", "/v1/models/register", registration(upstream, features=["tools"]))
    assert status == 201 and body["features"] == ["tools"], body
    await wait_state(gateway, "phi-4-finance", "ready")
    with pytest.raises(openai.BadRequestError) as info:
        await sdk(gateway).chat.completions.create(model="phi-4-finance", messages=[{"role": "user", "content": "hi"}],
                                                   response_format={"type": "json_object"})
    assert info.value.code == "model_not_capable" and "does not support json (its features: tools)" in info.value.message
    got, body, _ = await call(gateway, "POST", "/v1/models/register",
                              registration(upstream, name="other", features=["telepathy"]))
    assert got == 422 and body["error"]["param"].startswith("features"), body


@pytest.mark.parametrize(("headers", "status"), [({}, 401), ({"Authorization": "Bearer wrong"}, 401),
                                                 ({"Authorization": "Basic admin-secret"}, 401)])
async def test_admin_key_required(upstream, start_gateway, headers, status):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    got, body, _ = await call(gateway, "POST", "/v1/models/register", registration(upstream), headers=headers)
    assert got == status and body["error"]["type"] == "authentication_error"
    got, _, _ = await call(gateway, "GET", "/v1/registry", headers=headers)
    assert got == status


async def test_control_api_disabled_without_admin_key(upstream, start_gateway):
    gateway = await start_gateway(control_config(upstream.url))
    got, body, _ = await call(gateway, "POST", "/v1/models/register", registration(upstream))
    assert got == 403 and "SITS_ADMIN_KEY" in body["error"]["message"]


BAD_REGISTRATIONS = [
    ({"endpoint": "http://x/v1"}, "name"),
    ({"name": "bad name!", "endpoint": "http://127.0.0.1:1/v1"}, "name"),
    ({"name": "m"}, None),  # neither endpoint nor endpoints
    ({"name": "m", "endpoint": "http://127.0.0.1:1/v1", "latency_p95_ms": -3}, "latency_p95_ms"),
    ({"name": "m", "endpoint": "http://127.0.0.1:1/v1", "latency_p95_ms": "fast"}, "latency_p95_ms"),
    ({"name": "m", "endpoint": "http://127.0.0.1:1/v1", "tier": "gigantic"}, "tier"),
    ({"name": "m", "endpoint": "http://127.0.0.1:1/v1", "health_check_path": "health"}, "health_check_path"),
    ({"name": "m", "endpoint": "http://127.0.0.1:1/v1", "context_window": 0}, "context_window"),
    ({"name": "m", "endpoint": "http://127.0.0.1:1/v1", "colour": "red"}, "colour"),
    ({"name": "m", "endpoints": [{"url": "http://127.0.0.1:1/v1", "weight": 0}]}, "endpoints[0].weight"),
    ({"name": "m", "endpoint": "ftp://127.0.0.1/v1"}, "endpoint"),
    ({"name": "m", "endpoint": "http://169.254.169.254/latest/meta-data"}, "endpoint"),
    ({"name": "m", "endpoint": "http://[::ffff:169.254.169.254]/v1"}, "endpoint"),
    ({"name": "m", "endpoints": [{"url": "http://127.0.0.1:1/v1"}, {"url": "http://0xA9FEA9FE/v1"}]}, "endpoints[1]"),
    ({"name": "m", "endpoint": "http://127.0.0.1:1/v1", "key_env": "NOT_SET_ANYWHERE"}, "key_env"),
    ({"name": "static", "endpoint": "http://127.0.0.1:1/v1"}, "name"),  # a config model's name: 409
]


@pytest.mark.parametrize(("body", "param"), BAD_REGISTRATIONS)
async def test_invalid_registrations_name_the_field_and_change_nothing(upstream, start_gateway, body, param):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    status, answer, _ = await call(gateway, "POST", "/v1/models/register", body)
    assert status in (409, 422), answer
    assert answer["error"]["param"] == param or (param and param in (answer["error"]["param"] or ""))
    _, listing, _ = await call(gateway, "GET", "/v1/registry")
    assert listing["registry_version"] == 0
    assert [m["name"] for m in listing["data"]] == ["static"]


async def test_if_match_versions_update_and_delete(upstream, start_gateway):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    await call(gateway, "POST", "/v1/models/register", registration(upstream))
    status, body, _ = await call(gateway, "PATCH", "/v1/models/phi-4-finance", {"tier": "heavy"},
                                 headers={**AUTH, "If-Match": '"0"'})
    assert status == 412 and body["error"]["code"] == "registry_version_mismatch"
    status, body, _ = await call(gateway, "PATCH", "/v1/models/phi-4-finance", {"tier": "heavy", "tags": ["fin"]},
                                 headers={**AUTH, "If-Match": '"1"'})
    assert status == 200 and body["tier"] == "heavy" and body["tags"] == ["fin"] and body["registry_version"] == 2
    status, body, _ = await call(gateway, "PATCH", "/v1/models/static", {"tier": "heavy"})
    assert status == 409
    status, body, _ = await call(gateway, "DELETE", "/v1/models/phi-4-finance")
    assert status == 200 and body["registry_version"] == 3
    status, _, _ = await call(gateway, "GET", "/v1/models/phi-4-finance")
    assert status == 404
    with pytest.raises(openai.NotFoundError):
        await sdk(gateway).chat.completions.create(model="phi-4-finance", messages=[{"role": "user", "content": "x"}])


async def test_endpoints_added_and_removed(upstream, upstream_b, start_gateway):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    await call(gateway, "POST", "/v1/models/register", registration(upstream, name="multi"))
    status, body, _ = await call(gateway, "POST", "/v1/models/multi/endpoints", {"url": upstream_b.url, "weight": 2})
    assert status == 201 and [e["id"] for e in body["endpoints"]] == ["multi/ep-0", "multi/ep-1"]
    await wait_state(gateway, "multi", "ready", index=1)
    client = sdk(gateway)
    answers = await asyncio.gather(*[client.chat.completions.create(
        model="multi", messages=[{"role": "user", "content": "x"}]) for _ in range(30)])
    assert {a.choices[0].message.content for a in answers} == {"hello from upstream-a", "hello from upstream-b"}
    status, body, _ = await call(gateway, "DELETE", "/v1/models/multi/endpoints/ep-0")
    assert status == 200 and [e["id"] for e in body["endpoints"]] == ["multi/ep-1"]
    status, body, _ = await call(gateway, "DELETE", "/v1/models/multi/endpoints/ep-1")
    assert status == 409  # the last endpoint: delete the model instead


async def test_registry_survives_restart(upstream, start_gateway, tmp_path):
    data = tmp_path / "persist"
    first = await start_gateway(control_config(upstream.url), secrets=ADMIN, data_dir=data)
    await call(first, "POST", "/v1/models/register", registration(upstream, name="kept", tier="base"))
    await first.stop()
    second = await start_gateway(control_config(upstream.url), secrets=ADMIN, data_dir=data)
    status, body, _ = await call(second, "GET", "/v1/models/kept")
    assert status == 200 and body["tier"] == "base" and body["registry_version"] == 1
    await wait_state(second, "kept", "ready")


async def test_health_transitions_follow_a_real_upstream(upstream, start_gateway):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    await call(gateway, "POST", "/v1/models/register", registration(upstream, name="flaky"))
    await wait_state(gateway, "flaky", "ready")
    port = upstream.port
    await upstream.stop()  # the server goes away
    body = await wait_state(gateway, "flaky", "unhealthy")
    assert body["endpoints"][0]["last_probe_error"]
    with pytest.raises(openai.APIStatusError) as info:
        await sdk(gateway).chat.completions.create(model="flaky", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 503 and info.value.response.headers["retry-after"]
    await upstream.start(port)  # and comes back on the same port
    await wait_state(gateway, "flaky", "ready")


async def test_passive_ejection_never_ejects_the_last_endpoint(upstream, upstream_b, start_gateway):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    reg = {"name": "pair", "endpoints": [{"url": upstream.url}, {"url": upstream_b.url}]}
    await call(gateway, "POST", "/v1/models/register", reg)
    upstream.mode = upstream_b.mode = "error500"
    client = sdk(gateway)
    for _ in range(20):
        with pytest.raises(openai.APIStatusError):
            await client.chat.completions.create(model="pair", messages=[{"role": "user", "content": "x"}])
    _, body, _ = await call(gateway, "GET", "/v1/models/pair")
    ejected = [e["ejected_for_s"] > 0 for e in body["endpoints"]]
    assert ejected.count(True) == 1  # one ejected for 30 s; the other kept as the model's last


async def test_discovery_reads_models_of_a_server(upstream, start_gateway):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    status, body, _ = await call(gateway, "POST", "/v1/models/discover", {"base_url": upstream.url})
    assert status == 200 and body["models"] == ["served-a", "served-b"]


async def test_data_plane_keys_when_configured(upstream, start_gateway):
    config = one_model_config(upstream.url)
    config["server"]["api_keys_env"] = "CLIENT_KEYS"
    gateway = await start_gateway(config, secrets={"CLIENT_KEYS": "k1,k2"})
    good = sdk(gateway, api_key="k2")
    await good.chat.completions.create(model="m1", messages=[{"role": "user", "content": "x"}])
    bad = sdk(gateway, api_key="nope")
    with pytest.raises(openai.AuthenticationError):
        await bad.chat.completions.create(model="m1", messages=[{"role": "user", "content": "x"}])
    assert "authorization" not in upstream.log.headers[-1]


async def test_hot_plug_under_load_fails_no_request(upstream, upstream_b, start_gateway):
    """Models and endpoints come and go while clients keep calling: not one client request fails."""
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    await call(gateway, "POST", "/v1/models/register", registration(upstream, name="live"))
    await wait_state(gateway, "live", "ready")
    client = sdk(gateway)
    failures: list[BaseException] = []
    done = asyncio.Event()

    async def load(model: str) -> int:
        sent = 0
        while not done.is_set() and sent < 2000:
            try:
                await client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                                     stream=sent % 3 == 0)
            except Exception as exc:  # noqa: BLE001 - every failure is a test failure
                failures.append(exc)
            sent += 1
        return sent

    workers = [asyncio.create_task(load(m)) for m in ("live", "live", "static", "live")]
    for round_ in range(5):
        status, body, _ = await call(gateway, "POST", "/v1/models/live/endpoints", {"url": upstream_b.url})
        assert status == 201, body
        new_id = body["endpoints"][-1]["id"]
        await call(gateway, "POST", "/v1/models/register", registration(upstream_b, name=f"extra-{round_}"))
        await asyncio.sleep(0.15)
        status, _, _ = await call(gateway, "DELETE", f"/v1/models/live/endpoints/{new_id}")
        assert status == 200
        await call(gateway, "DELETE", f"/v1/models/extra-{round_}")
    done.set()
    sent = sum(await asyncio.gather(*workers))
    assert sent > 50
    assert failures == []


async def test_removed_endpoints_leave_no_cached_upstream_state(upstream, start_gateway):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    client = sdk(gateway)
    for i in range(5):
        await call(gateway, "POST", "/v1/models/register", {"name": f"tmp-{i}", "endpoint": upstream.url})
        await client.chat.completions.create(model=f"tmp-{i}", messages=[{"role": "user", "content": "x"}])
        await call(gateway, "DELETE", f"/v1/models/tmp-{i}")
    # only the config model's endpoint may still have its request prefix encoded
    assert len(gateway._backend._encoded) <= 1
