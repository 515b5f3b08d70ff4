"""The tenant admin API and `sits keys|teams|spend` against a real gateway over loopback, on the embedded
SQLite store and on PostgreSQL: the key lifecycle, spend reports and who may read them, bad input."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import aiohttp
import pytest

from sits.app import Gateway
from sits.configuration.gateway import parse_config
from sits.settings import Settings
from sits.tenants.records import SpendRecord, Usage, hash_key
from tests.conftest import base_url, one_model_config
from tests.tenants.databases import database_url_fixture, empty_database, pg_database_fixture  # noqa: F401  (fixtures)

ADMIN_KEY = "admin-secret"
SECRETS = {"SITS_ADMIN_KEY": ADMIN_KEY, "SITS_KEY_SECRET": "tenant-hash-secret"}
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def tenant_config(upstream_url: str, **tenants: Any) -> dict[str, Any]:
    return {**one_model_config(upstream_url), "tenants": {"enabled": True, "refresh_s": 0.1, **tenants}}


async def call(gateway: Gateway, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
               raw: bytes | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, base_url(gateway) + path, json=body, data=raw,
                                   headers=ADMIN if headers is None else headers) as response:
            return response.status, await response.json(content_type=None)


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def spend(i: int, key_id: str, team_id: str, cost: float, model: str = "m1") -> SpendRecord:
    return SpendRecord(request_id=f"req-{i}", at=time.time(), key_id=key_id, team_id=team_id, user=None, model=model,
                       endpoint="e1", usage=Usage(10, 0, 5, 0), cost_usd=cost, latency_ms=5.0, status=200)


async def test_key_lifecycle_create_rotate_revoke_expire(upstream, start_gateway, database_url):
    gateway = await start_gateway(tenant_config(upstream.url, database_url=database_url), secrets=SECRETS)
    status, team = await call(gateway, "POST", "/v1/teams", {"team_id": "search", "name": "Search",
                                                             "budget": {"period": "monthly", "hard_usd": 50}})
    assert status == 201 and team["budget"] == {"period": "monthly", "hard_usd": 50.0, "soft_usd": None}
    status, created = await call(gateway, "POST", "/v1/keys", {
        "name": "indexer", "team_id": "search", "allowed_models": ["m1", "gpt-*"], "priority": "batch",
        "limits": {"rpm": 60}, "model_limits": {"gpt-*": {"tpm": 1000}}, "metadata": {"owner": "ops"}})
    assert status == 201, created
    secret, key_id = created["key"], created["key_id"]
    assert secret.startswith("sk-sits-") and created["priority"] == "P2" and created["status"] == "active"
    status, shown = await call(gateway, "GET", f"/v1/keys/{key_id}")
    assert status == 200 and "key" not in shown and secret not in json.dumps(shown)
    assert shown["model_limits"] == {"gpt-*": {"rpm": None, "tpm": 1000, "concurrency": None}}
    record = gateway.tenants.directory.by_hash(hash_key(secret, gateway.tenants.key_secret))
    assert record is not None and record.allowed_models == ("m1", "gpt-*") and record.limits.rpm == 60

    # The key reads its own team's spend: a data-plane path that authenticates through the directory.
    assert (await call(gateway, "GET", "/v1/spend", headers=bearer(secret)))[0] == 200

    status, rotated = await call(gateway, "POST", f"/v1/keys/{key_id}/rotate", {"overlap_s": 600})
    assert status == 200 and rotated["key"] != secret and rotated["key_id"] == key_id
    assert len(rotated["previous_secrets_valid_until"]) == 1
    await gateway.tenants.directory.refresh()
    for s in (secret, rotated["key"]):  # both work during the overlap
        assert (await call(gateway, "GET", "/v1/spend", headers=bearer(s)))[0] == 200
    old = gateway.tenants.directory.by_hash(hash_key(secret, gateway.tenants.key_secret))
    assert old.valid_until is not None and old.usable_at(time.time()) and not old.usable_at(old.valid_until)
    status, quick = await call(gateway, "POST", f"/v1/keys/{key_id}/rotate", {"overlap_s": 0})
    await gateway.tenants.directory.refresh()
    assert (await call(gateway, "GET", "/v1/spend", headers=bearer(rotated["key"])))[0] == 401  # no overlap
    assert (await call(gateway, "GET", "/v1/spend", headers=bearer(quick["key"])))[0] == 200

    status, revoked = await call(gateway, "POST", f"/v1/keys/{key_id}/revoke")
    assert status == 200 and revoked["status"] == "revoked"
    await gateway.tenants.directory.refresh()
    status, error = await call(gateway, "GET", "/v1/spend", headers=bearer(quick["key"]))
    assert status == 401 and error["error"]["code"] == "invalid_api_key"

    status, brief = await call(gateway, "POST", "/v1/keys", {"name": "brief", "team_id": "search",
                                                             "expires_in_s": 0.3})
    assert status == 201 and (await call(gateway, "GET", "/v1/spend", headers=bearer(brief["key"])))[0] == 200
    await asyncio.sleep(0.4)
    assert (await call(gateway, "GET", "/v1/spend", headers=bearer(brief["key"])))[0] == 401
    assert (await call(gateway, "GET", f"/v1/keys/{brief['key_id']}"))[1]["status"] == "expired"

    status, patched = await call(gateway, "PATCH", f"/v1/keys/{brief['key_id']}",
                                 {"limits": {"concurrency": 3}, "budget": {"period": "daily", "soft_usd": 1.5}})
    assert status == 200 and patched["limits"]["concurrency"] == 3 and patched["budget"]["soft_usd"] == 1.5
    status, listed = await call(gateway, "GET", "/v1/keys?team=search&limit=1")
    assert status == 200 and len(listed["data"]) == 1 and listed["next_cursor"] is not None
    status, rest = await call(gateway, "GET", f"/v1/keys?team=search&cursor={listed['next_cursor']}")
    assert {k["key_id"] for k in listed["data"] + rest["data"]} == {key_id, brief["key_id"]}

    status, refused = await call(gateway, "DELETE", "/v1/teams/search")
    assert status == 409 and brief["key_id"] in refused["error"]["message"]
    await call(gateway, "POST", f"/v1/keys/{brief['key_id']}/revoke")
    assert (await call(gateway, "DELETE", "/v1/teams/search"))[0] == 200
    assert (await call(gateway, "GET", "/v1/teams/search"))[0] == 404


async def test_a_team_key_reads_only_its_own_teams_spend(upstream, start_gateway):
    gateway = await start_gateway(tenant_config(upstream.url), secrets=SECRETS)
    keys = {}
    for team in ("red", "blue"):
        await call(gateway, "POST", "/v1/teams", {"team_id": team, "name": team.title()})
        keys[team] = (await call(gateway, "POST", "/v1/keys", {"name": f"{team}-app", "team_id": team}))[1]
    for i in range(6):
        team = "red" if i < 4 else "blue"
        gateway.tenants.spend_log.record(spend(i, keys[team]["key_id"], team, 0.5, model=f"m{i % 2}"))
    await gateway.tenants.spend_log.flush()

    status, red = await call(gateway, "GET", "/v1/spend?group_by=team", headers=bearer(keys["red"]["key"]))
    assert status == 200 and [(r["team"], r["requests"], r["cost_usd"]) for r in red["data"]] == [("red", 4, 2.0)]
    status, refused = await call(gateway, "GET", "/v1/spend?team=blue", headers=bearer(keys["red"]["key"]))
    assert status == 403 and refused["error"]["param"] == "team"
    status, by_key = await call(gateway, "GET", f"/v1/spend?key={keys['blue']['key_id']}",
                                headers=bearer(keys["red"]["key"]))
    assert status == 200 and by_key["data"] == []  # another team's key id shows nothing
    assert (await call(gateway, "GET", "/v1/spend", headers=bearer("sk-sits-guess")))[0] == 401
    assert (await call(gateway, "GET", "/v1/spend", headers={}))[0] == 401

    status, everyone = await call(gateway, "GET", "/v1/spend?group_by=team")  # the admin key: every team
    assert [(r["team"], r["requests"]) for r in everyone["data"]] == [("blue", 2), ("red", 4)]
    today = time.strftime("%Y-%m-%d", time.gmtime())
    status, days = await call(gateway, "GET", f"/v1/spend?group_by=day&from={today}&to={today}")
    assert days["data"][0]["day"] == today and days["data"][0]["requests"] == 6
    pages, cursor = [], ""
    for _ in range(5):
        status, page = await call(gateway, "GET", "/v1/spend?group_by=model&limit=1" + cursor)
        pages += [r["model"] for r in page["data"]]
        if page["next_cursor"] is None:
            break
        cursor = f"&cursor={page['next_cursor']}"
    assert pages == ["m0", "m1"]


BAD_INPUT = [
    ("POST", "/v1/teams", {"name": ""}, 422, "name"),
    ("POST", "/v1/teams", {"name": "T", "team_id": "has space"}, 422, "team_id"),
    ("POST", "/v1/teams", {"name": "T", "colour": "red"}, 422, "colour"),
    ("POST", "/v1/teams", {"name": "T", "limits": {"rpm": 0}}, 422, "limits.rpm"),
    ("POST", "/v1/teams", {"name": "T", "limits": {"rpm": "10"}}, 422, "limits.rpm"),
    ("POST", "/v1/teams", {"name": "T", "budget": {"period": "hourly", "hard_usd": 1}}, 422, "budget.period"),
    ("POST", "/v1/teams", {"name": "T", "budget": {"period": "daily"}}, 422, "budget"),
    ("POST", "/v1/teams", {"name": "T", "budget": {"period": "daily", "hard_usd": 1, "soft_usd": 2}}, 422, "budget"),
    ("POST", "/v1/teams", {"name": "T", "budget": {"period": "daily", "hard_usd": -1}}, 422, "budget.hard_usd"),
    ("POST", "/v1/teams", {"team_id": "red", "name": "again"}, 409, "team_id"),
    ("PATCH", "/v1/teams/red", {"name": None}, 422, "name"),
    ("PATCH", "/v1/teams/nobody", {"name": "x"}, 404, "team_id"),
    ("POST", "/v1/keys", {"name": "k"}, 422, "team_id"),
    ("POST", "/v1/keys", {"name": "k", "team_id": "nobody"}, 422, "team_id"),
    ("POST", "/v1/keys", {"name": "k", "team_id": "red", "allowed_models": []}, 422, "allowed_models"),
    ("POST", "/v1/keys", {"name": "k", "team_id": "red", "priority": "urgent"}, 422, "priority"),
    ("POST", "/v1/keys", {"name": "k", "team_id": "red", "expires_at": 1000}, 422, "expires_at"),
    ("POST", "/v1/keys", {"name": "k", "team_id": "red", "expires_at": 4e9, "expires_in_s": 5}, 422, "expires_in_s"),
    ("POST", "/v1/keys", {"name": "k", "team_id": "red", "model_limits": {"m": {"tpm": -5}}}, 422,
     "model_limits.m.tpm"),
    ("POST", "/v1/keys", {"name": "k", "team_id": "red", "metadata": {"a": 1}}, 422, "metadata.a"),
    ("PATCH", "/v1/keys/KEY", {"team_id": "blue"}, 422, "team_id"),
    ("PATCH", "/v1/keys/KEY", {"allowed_models": None}, 422, "allowed_models"),
    ("PATCH", "/v1/keys/KEY", {"expires_at": 5}, 422, "expires_at"),
    ("POST", "/v1/keys/KEY/rotate", {"overlap_s": -1}, 422, "overlap_s"),
    ("POST", "/v1/keys/KEY/rotate", {"overlap_s": 1e12}, 422, "overlap_s"),
    ("POST", "/v1/keys/key_missing/rotate", {}, 404, "key_id"),
    ("POST", "/v1/keys/KEY/revoke", {"now": True}, 422, "now"),
    ("GET", "/v1/spend?group_by=user", None, 400, "group_by"),
    ("GET", "/v1/spend?from=yesterday", None, 400, "from"),
    ("GET", "/v1/spend?from=2026-02-02&to=2026-02-01", None, 400, "from"),
    ("GET", "/v1/spend?limit=0", None, 400, "limit"),
    ("GET", "/v1/spend?limit=ten", None, 400, "limit"),
    ("GET", "/v1/spend?cursor=zzz", None, 400, "cursor"),
    ("GET", "/v1/spend?colour=red", None, 400, "colour"),
    ("GET", "/v1/keys?limit=5000", None, 400, "limit"),
]


async def test_bad_admin_input_is_refused_naming_the_field_and_nothing_is_written(upstream, start_gateway):
    gateway = await start_gateway(tenant_config(upstream.url), secrets=SECRETS)
    await call(gateway, "POST", "/v1/teams", {"team_id": "red", "name": "Red"})
    key_id = (await call(gateway, "POST", "/v1/keys", {"name": "k", "team_id": "red"}))[1]["key_id"]
    before = await gateway.tenants.store.version()
    shown = await call(gateway, "GET", f"/v1/keys/{key_id}")
    for method, path, body, want, param in BAD_INPUT:
        status, answer = await call(gateway, method, path.replace("KEY", key_id), body)
        assert (status, answer["error"]["param"]) == (want, param), (method, path, body, answer)
        assert answer["error"]["message"]
    status, answer = await call(gateway, "POST", "/v1/teams", raw=b"{not json", headers={**ADMIN})
    assert status == 400 and answer["error"]["param"] == "body"
    assert (await call(gateway, "POST", "/v1/teams", {"name": "T"}, headers={}))[0] == 401
    assert (await call(gateway, "POST", "/v1/teams", {"name": "T"}, headers=bearer("wrong")))[0] == 401
    assert await gateway.tenants.store.version() == before  # nothing written
    assert await call(gateway, "GET", f"/v1/keys/{key_id}") == shown


async def sits(gateway: Gateway, *args: str, key: str = ADMIN_KEY) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sits", *args[:1], "--url", base_url(gateway), *args[1:],
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "SITS_ADMIN_KEY": key})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_cli_teams_keys_and_spend_create_rotate_revoke_expire(upstream, start_gateway):
    gateway = await start_gateway(tenant_config(upstream.url), secrets=SECRETS)
    code, out, err = await sits(gateway, "teams", "create", "--name", "Search", "--id", "search", "--rpm", "100",
                                "--budget-usd", "20", "--period", "weekly")
    assert code == 0, err
    assert json.loads(out)["budget"]["hard_usd"] == 20.0
    code, out, err = await sits(gateway, "keys", "create", "--team", "search", "--name", "app", "--models", "m1,m2",
                                "--priority", "interactive", "--expires-in-s", "3600", "--metadata", "owner=ops")
    assert code == 0, err
    created = json.loads(out)
    assert created["allowed_models"] == ["m1", "m2"] and created["key"].startswith("sk-sits-")
    assert "shown only now" in err
    code, out, err = await sits(gateway, "keys", "rotate", created["key_id"], "--overlap-s", "60")
    rotated = json.loads(out)
    assert code == 0 and rotated["key"] != created["key"]
    gateway.tenants.spend_log.record(spend(1, created["key_id"], "search", 1.25))
    await gateway.tenants.spend_log.flush()
    code, out, err = await sits(gateway, "spend", "--json", key=rotated["key"])  # a team's own key
    assert code == 0, err
    assert [(r["key"], r["cost_usd"]) for r in json.loads(out)] == [(created["key_id"], 1.25)]
    code, out, err = await sits(gateway, "keys", "revoke", created["key_id"])
    assert code == 0 and json.loads(out)["status"] == "revoked"
    code, out, err = await sits(gateway, "keys", "create", "--team", "search", "--name", "brief", "--expires-in-s", "0.5")
    brief = json.loads(out)
    await asyncio.sleep(max(0.0, brief["expires_at"] - time.time()) + 0.05)
    code, out, err = await sits(gateway, "keys", "show", brief["key_id"])
    assert code == 0 and json.loads(out)["status"] == "expired" and "key" not in json.loads(out)
    code, out, err = await sits(gateway, "keys", "list", "--team", "search")
    assert code == 0 and created["key_id"] in out and "revoked" in out
    code, out, err = await sits(gateway, "spend", "--group-by", "team")
    assert code == 0 and "search" in out and "1.2500" in out and "TOTAL" in out
    code, out, err = await sits(gateway, "teams", "create", "--name", "")
    assert code == 1 and "name" in err


async def test_graceful_stop_flushes_the_spend_log(upstream, tmp_path):
    settings = Settings(host="127.0.0.1", port=0, secrets=SECRETS, data_dir=tmp_path / "data")
    config = parse_config(tenant_config(upstream.url, spend_log={"flush_interval_s": 3600}))
    gateway = Gateway(settings, config)
    await gateway.start()
    for i in range(40):
        gateway.tenants.spend_log.record(spend(i, "key_x", "team_x", 0.1))
    await gateway.stop()
    again = Gateway(settings, config)  # the same data dir: the embedded SQLite store
    await again.start()
    try:
        assert await again.tenants.spend_log.period_spend_exact("team", "team_x", "total") == pytest.approx(4.0)
        assert again.tenants.spend_log.period_spend("team", "team_x", "total") == pytest.approx(4.0)  # loaded at start
    finally:
        await again.stop()


async def test_a_revocation_on_one_replica_reaches_another_within_its_refresh(upstream, start_gateway, tmp_path,
                                                                             database_url):
    """Two gateways on one database, as two replicas: a key revoked through one stops working on the other."""
    config = tenant_config(upstream.url, database_url=database_url)
    first = await start_gateway(config, secrets=SECRETS, data_dir=tmp_path / "first")
    second = await start_gateway(config, secrets=SECRETS, data_dir=tmp_path / "second")
    await call(first, "POST", "/v1/teams", {"team_id": "replicas", "name": "Replicas"})
    key = (await call(first, "POST", "/v1/keys", {"name": "app", "team_id": "replicas"}))[1]

    async def second_says() -> int:
        return (await call(second, "GET", "/v1/spend", headers=bearer(key["key"])))[0]

    async def until(status: int) -> int:
        for _ in range(50):  # refresh_s is 0.1: a handful of rounds at most
            if (seen := await second_says()) == status:
                return seen
            await asyncio.sleep(0.1)
        return seen

    assert await until(200) == 200
    await call(first, "POST", f"/v1/keys/{key['key_id']}/revoke")
    assert await until(401) == 401
    assert second.tenants.directory.version == first.tenants.directory.version
    async with aiohttp.ClientSession() as session:
        async with session.get(base_url(second) + "/metrics") as response:
            exposition = await response.text()
    assert f"sits_key_directory_version {float(second.tenants.directory.version)}" in exposition
    assert "sits_spend_log_rows_queued 0.0" in exposition


async def test_a_revocation_is_pushed_to_another_replica_long_before_its_refresh(upstream, start_gateway, tmp_path,
                                                                                pg_database):
    """Two replicas on one PostgreSQL database and one cluster transport (Redis), polling the store only every
    five minutes: a key created, then revoked, through one works, then stops working, on the other within
    the replication bound, so the cluster document's notice is what made it happen, not polling."""
    await empty_database(pg_database)
    namespace = f"sits:test-keys:{os.getpid()}:{time.monotonic_ns()}"
    config = {**tenant_config(upstream.url, database_url=pg_database, refresh_s=300.0),
              "cluster": {"redis_url": "redis://127.0.0.1:6379/0", "namespace": namespace, "anti_entropy_s": 60.0,
                          "heartbeat_s": 0.2}}
    first = await start_gateway({**config, "cluster": {**config["cluster"], "replica_id": "first"}}, secrets=SECRETS,
                                data_dir=tmp_path / "first")
    second = await start_gateway({**config, "cluster": {**config["cluster"], "replica_id": "second"}},
                                 secrets=SECRETS, data_dir=tmp_path / "second")
    assert first.tenants.notices is not None and second.tenants.notices is not None
    await call(first, "POST", "/v1/teams", {"team_id": "pushed", "name": "Pushed"})
    key = (await call(first, "POST", "/v1/keys", {"name": "app", "team_id": "pushed"}))[1]

    async def second_says(status: int, within_s: float) -> tuple[int, float]:
        started = time.monotonic()
        while True:
            seen = (await call(second, "GET", "/v1/spend", headers=bearer(key["key"])))[0]
            if seen == status or time.monotonic() - started > within_s:
                return seen, time.monotonic() - started
            await asyncio.sleep(0.02)

    seen, _ = await second_says(200, 10.0)  # created through the first: known to the second without a poll
    assert seen == 200
    received = second.tenants.notices.received
    await call(first, "POST", f"/v1/keys/{key['key_id']}/revoke")
    seen, took = await second_says(401, 10.0)
    assert seen == 401 and took < 10.0  # refresh_s is 300: only the pushed notice can explain it
    assert second.tenants.notices.received > received
    assert second.tenants.directory.version == first.tenants.directory.version
