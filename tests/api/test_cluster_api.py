"""The cluster API on one gateway (a cluster of one): switches, canaries, bad input, the CLI."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from typing import Any

import aiohttp
import pytest

from tests.conftest import base_url, sdk

ADMIN = {"SITS_ADMIN_KEY": "admin-secret"}
AUTH = {"Authorization": "Bearer admin-secret"}


def versions_config(v1_url: str, v2_url: str, **cluster: Any) -> dict[str, Any]:
    return {
        "server": {"drain_timeout_s": 1},
        "models": [{"name": "chat@v1", "endpoints": [{"url": v1_url}]},
                   {"name": "chat@v2", "endpoints": [{"url": v2_url}]}],
        "aliases": {"chat-default": "chat@v1"},
        "cluster": {"replica_id": "solo", "heartbeat_s": 0.1, **cluster},
    }


async def call(gateway, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
               data: bytes | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, base_url(gateway) + path, json=body, data=data,
                                   headers=AUTH if headers is None else headers) as r:
            return r.status, await r.json(content_type=None)


async def ask(gateway, n: int) -> Counter[str]:
    client = sdk(gateway)
    answers = await asyncio.gather(*(client.chat.completions.create(
        model="chat-default", messages=[{"role": "user", "content": "hi"}]) for _ in range(n)))
    await client.close()
    return Counter(a.model for a in answers)


async def test_switch_then_canary_then_promote(upstream, upstream_b, start_gateway):
    gateway = await start_gateway(versions_config(upstream.url, upstream_b.url), secrets=ADMIN)
    status, listing = await call(gateway, "GET", "/v1/aliases")
    assert status == 200
    assert listing["data"] == [{"alias": "chat-default", "target": "chat@v1", "previous": None, "canary_weight": 1.0,
                                "epoch": 0, "phase": "active", "stamp": None, "replicas": {}}]

    status, switched = await call(gateway, "POST", "/v1/aliases/chat-default/switch", {"to": "chat@v2"})
    assert status == 202
    assert (switched["target"], switched["previous"], switched["epoch"]) == ("chat@v2", "chat@v1", 1)
    assert switched["phase"] == "retired"  # one replica, nothing in flight on v1
    assert await ask(gateway, 5) == Counter({"chat@v2": 5})

    # Canary back to v1 for 30% of new requests; the rest stay on v2.
    status, canary = await call(gateway, "POST", "/v1/aliases/chat-default/switch",
                                {"to": "chat@v1", "canary_weight": 0.3})
    assert status == 202 and canary["phase"] == "canary" and canary["previous"] == "chat@v2"
    split = await ask(gateway, 200)
    assert set(split) == {"chat@v1", "chat@v2"} and 30 <= split["chat@v1"] <= 90, split

    status, promoted = await call(gateway, "POST", "/v1/aliases/chat-default/switch", {"to": "chat@v1"})
    assert status == 202 and promoted["epoch"] == 3 and promoted["previous"] == "chat@v2"
    assert await ask(gateway, 5) == Counter({"chat@v1": 5})

    status, cluster = await call(gateway, "GET", "/v1/cluster")
    assert status == 200 and cluster["replica_id"] == "solo" and cluster["converged"]
    assert cluster["members"] == ["solo"] and cluster["transports"] == {}


async def test_a_new_alias_can_be_created_by_a_switch(upstream, upstream_b, start_gateway):
    gateway = await start_gateway(versions_config(upstream.url, upstream_b.url), secrets=ADMIN)
    status, created = await call(gateway, "POST", "/v1/aliases/chat-fast/switch", {"to": "chat@v2"})
    assert status == 202 and created["phase"] == "active" and created["previous"] is None
    client = sdk(gateway)
    answer = await client.chat.completions.create(model="chat-fast", messages=[{"role": "user", "content": "hi"}])
    await client.close()
    assert answer.model == "chat@v2"


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/aliases/chat-default/switch", {"to": "chat@v9"}, 422, "to"),
        ("/v1/aliases/chat-default/switch", {"to": "chat-default"}, 422, "to"),  # an alias, not a model
        ("/v1/aliases/chat-default/switch", {}, 422, "to"),
        ("/v1/aliases/chat-default/switch", {"to": "chat@v2", "canary_weight": 0}, 422, "canary_weight"),
        ("/v1/aliases/chat-default/switch", {"to": "chat@v2", "canary_weight": 1.5}, 422, "canary_weight"),
        ("/v1/aliases/chat-default/switch", {"to": "chat@v2", "weight": 0.1}, 422, "weight"),
        ("/v1/aliases/chat-new/switch", {"to": "chat@v2", "canary_weight": 0.1}, 422, "canary_weight"),
        ("/v1/aliases/chat@v1/switch", {"to": "chat@v2"}, 409, "alias"),  # a model's name
        ("/v1/aliases/%20bad/switch", {"to": "chat@v2"}, 400, "alias"),
        ("/v1/aliases/chat-default/flip", {"to": "chat@v2"}, 404, None),
    ],
)
async def test_bad_switches_name_the_field_and_change_nothing(upstream, upstream_b, start_gateway,
                                                              path, body, status, param):
    gateway = await start_gateway(versions_config(upstream.url, upstream_b.url), secrets=ADMIN)
    got, error = await call(gateway, "POST", path, body)
    assert got == status, error
    assert error["error"]["param"] == param
    _, listing = await call(gateway, "GET", "/v1/aliases")
    assert [(a["alias"], a["target"], a["epoch"]) for a in listing["data"]] == [("chat-default", "chat@v1", 0)]


async def test_the_cluster_api_is_admin_guarded(upstream, upstream_b, start_gateway):
    gateway = await start_gateway(versions_config(upstream.url, upstream_b.url), secrets=ADMIN)
    for method, path in [("GET", "/v1/aliases"), ("GET", "/v1/cluster"), ("POST", "/v1/cluster/sync"),
                         ("POST", "/v1/aliases/chat-default/switch")]:
        status, error = await call(gateway, method, path, {"to": "chat@v2"}, headers={})
        assert status == 401 and error["error"]["type"] == "authentication_error", (method, path)
    closed = await start_gateway(versions_config(upstream.url, upstream_b.url))  # no admin key at all
    status, _ = await call(closed, "GET", "/v1/cluster")
    assert status == 403


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"not json", "invalid cluster message"),
        (b'{"version": 2, "origin": "x"}', "version"),
        (b'{"version": 1, "origin": "x", "served": {"x": -1}}', "served"),
        (b'{"version": 1, "origin": "x", "aliases": {"a": {"s": [1, 0, "x"], "v": {"target": "m",'
         b' "canary_weight": 2}}}}', "canary_weight"),
    ],
)
async def test_sync_refuses_a_malformed_document_whole(upstream, upstream_b, start_gateway, data, fragment):
    gateway = await start_gateway(versions_config(upstream.url, upstream_b.url), secrets=ADMIN)
    status, error = await call(gateway, "POST", "/v1/cluster/sync", data=data,
                               headers={**AUTH, "content-type": "application/json"})
    assert status == 400 and error["error"]["param"] == "body" and fragment in error["error"]["message"]
    _, cluster = await call(gateway, "GET", "/v1/cluster")
    assert [r["id"] for r in cluster["replicas"]] == ["solo"]


async def test_cluster_config_is_strict():
    from sits.configuration.gateway import parse_config
    from sits.errors import ConfigError

    for bad, fragment in [({"replica": "x"}, "cluster.replica: unknown key"),
                          ({"redis_url": "http://x"}, "cluster.redis_url"),
                          ({"peers": ["ftp://x"]}, "cluster.peers"),
                          ({"anti_entropy_s": 0}, "cluster.anti_entropy_s")]:
        with pytest.raises(ConfigError) as err:
            parse_config({"cluster": bad})
        assert fragment in err.value.message


async def test_http_peers_need_the_admin_key(upstream, upstream_b, start_gateway):
    from sits.errors import ConfigError

    with pytest.raises(ConfigError, match="cluster.peers"):
        await start_gateway(versions_config(upstream.url, upstream_b.url, peers=["http://127.0.0.1:9"]))


async def test_sits_cluster_status_and_switch_cli(upstream, upstream_b, start_gateway):
    gateway = await start_gateway(versions_config(upstream.url, upstream_b.url), secrets=ADMIN)

    async def sits_cluster(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sits", "cluster", *args, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, "SITS_ADMIN_KEY": "admin-secret"})
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode or 0, out.decode(), err.decode()

    code, out, err = await sits_cluster("switch", "chat-default", "chat@v2", "--url", base_url(gateway))
    assert code == 0, err
    code, out, err = await sits_cluster("status", "--url", base_url(gateway))
    assert code == 0, err
    assert "replica solo" in out and "converged" in out
    assert "chat-default" in out and "chat@v2" in out and "retired" in out
    code, _, err = await sits_cluster("switch", "chat-default", "nope", "--url", base_url(gateway))
    assert code == 1 and "422" in err and "'to'" in err


async def test_a_switch_that_cannot_be_persisted_is_not_applied(upstream, upstream_b, start_gateway, tmp_path):
    gateway = await start_gateway(versions_config(upstream.url, upstream_b.url), secrets=ADMIN,
                                  data_dir=tmp_path / "solo-data")
    (tmp_path / "solo-data" / "cluster" / "solo.json").mkdir(parents=True)  # the atomic rename cannot happen
    status, error = await call(gateway, "POST", "/v1/aliases/chat-default/switch", {"to": "chat@v2"})
    assert status == 500 and "not applied" in error["error"]["message"]
    _, listing = await call(gateway, "GET", "/v1/aliases")
    assert [(a["target"], a["epoch"]) for a in listing["data"]] == [("chat@v1", 0)]
    assert await ask(gateway, 3) == Counter({"chat@v1": 3})
