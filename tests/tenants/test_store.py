"""The tenant store on SQLite and PostgreSQL: migrations raced by several starters, teams and keys, the
version every write moves, rotation and revocation as the live directory sees them."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from sits.errors import Conflict, NotFound, UnprocessableRequest
from sits.tenants.directory import LiveKeyDirectory
from sits.tenants.key_lifecycle import SECRET_PREFIX, KeyLifecycle
from sits.tenants.migrations import MIGRATIONS
from sits.tenants.records import Budget, KeyRecord, Limits, TeamRecord
from sits.tenants.store import TenantStore, open_database
from tests.tenants.databases import database_url_fixture, pg_database_fixture  # noqa: F401  (fixtures)

SECRET = b"test-key-secret"


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def opened(url: str) -> TenantStore:
    store = TenantStore(open_database(url))
    await store.start()
    return store


def key(team: str = "search", name: str = "indexer", **fields) -> KeyRecord:
    return KeyRecord(key_id="", name=name, team_id=team, key_hash=b"", **fields)


async def test_concurrent_migrators_apply_each_migration_once(database_url):
    stores = [TenantStore(open_database(database_url)) for _ in range(6)]
    try:
        versions = await asyncio.gather(*(s.migrate() for s in stores))
        assert versions == [MIGRATIONS[-1].version] * 6
        rows = await stores[0].db.fetch("SELECT version FROM schema_version ORDER BY version")
        assert [r[0] for r in rows] == [m.version for m in MIGRATIONS]
        assert await stores[3].version() == 0
        assert await stores[0].migrate() == MIGRATIONS[-1].version  # again: nothing to do
    finally:
        for s in stores:
            await s.close()


async def test_teams_and_keys_round_trip_and_every_write_moves_the_version(database_url):
    store = await opened(database_url)
    clock = Clock()
    keys = KeyLifecycle(store, SECRET, clock)
    try:
        v0 = await store.version()
        await store.create_team(TeamRecord("search", "Search", organisation="acme", limits=Limits(rpm=100),
                                           budget=Budget("monthly", hard_usd=50.0), metadata=(("cc", "42"),)),
                                clock())
        v1 = await store.version()
        issued = await keys.create(key(allowed_models=("gpt-*", "chat"), priority="P2",
                                       limits=Limits(rpm=10, tpm=1000, concurrency=2),
                                       model_limits=(("gpt-*", Limits(rpm=5)),), budget=Budget("daily", 1.0, 0.5),
                                       expires_at=clock() + 3600, metadata=(("owner", "ops"),)))
        v2 = await store.version()
        assert v0 < v1 < v2
        assert issued.secret.startswith(SECRET_PREFIX) and len(issued.secret) > 40
        shown = (await store.key(issued.entry.record.key_id)).record
        assert shown == dataclasses.replace(issued.entry.record)
        assert shown.key_hash == keys.hash(issued.secret) and issued.secret.encode() not in shown.key_hash
        assert shown.model_limits == (("gpt-*", Limits(rpm=5)),) and shown.budget == Budget("daily", 1.0, 0.5)
        team = (await store.team("search")).record
        assert team.organisation == "acme" and team.budget == Budget("monthly", 50.0) and team.metadata == (("cc", "42"),)

        updated = await store.update_key(shown.key_id, {"limits": Limits(rpm=20), "budget": None, "priority": None},
                                         clock())
        assert updated.record.limits == Limits(rpm=20) and updated.record.budget is None
        assert updated.record.allowed_models == ("gpt-*", "chat")  # untouched
        assert await store.version() == v2 + 1
        with pytest.raises(NotFound):
            await store.update_key("key_missing", {"name": "x"}, clock())
        with pytest.raises(UnprocessableRequest) as bad_team:
            await keys.create(key(team="nope"))
        assert bad_team.value.param == "team_id"
        with pytest.raises(Conflict):
            await store.create_team(TeamRecord("search", "again"), clock())
        assert await store.version() == v2 + 1  # refused writes move nothing
        listed = await store.keys(team_id="search")
        assert [k.record.key_id for k in listed] == [shown.key_id]
    finally:
        await store.close()


async def test_rotation_overlap_and_revocation_as_the_directory_sees_them(database_url):
    store = await opened(database_url)
    clock = Clock()
    directory = LiveKeyDirectory(store, refresh_s=0.05)
    keys = KeyLifecycle(store, SECRET, clock)
    try:
        await store.create_team(TeamRecord("search", "Search"), clock())
        first = await keys.create(key())
        await directory.refresh()
        found = directory.by_hash(keys.hash(first.secret))
        assert found is not None and found.usable_at(clock()) and directory.team("search").name == "Search"

        second = await keys.rotate(first.entry.record.key_id, overlap_s=60)
        assert second.secret != first.secret
        assert await directory.refresh()
        old, new = directory.by_hash(keys.hash(first.secret)), directory.by_hash(keys.hash(second.secret))
        assert old.key_id == new.key_id == first.entry.record.key_id
        assert old.valid_until == clock() + 60 and new.valid_until is None
        assert old.usable_at(clock() + 59) and not old.usable_at(clock() + 60)  # the overlap window ends
        assert new.usable_at(clock() + 3600)
        assert second.entry.previous_valid_until == (clock() + 60,)

        await keys.revoke(first.entry.record.key_id)
        assert await directory.refresh()
        for secret in (first.secret, second.secret):
            assert not directory.by_hash(keys.hash(secret)).usable_at(clock() + 1)
        with pytest.raises(Conflict):
            await keys.rotate(first.entry.record.key_id, overlap_s=0)
        assert directory.by_hash(keys.hash("sk-sits-unknown")) is None
    finally:
        await store.close()


async def test_a_revocation_reaches_another_replicas_directory_within_its_refresh(database_url):
    """Two stores on one database, as two replicas: the second learns of the revocation by refreshing."""
    writer, reader = await opened(database_url), await opened(database_url)
    clock = Clock()
    directory = LiveKeyDirectory(reader, refresh_s=0.05)
    keys = KeyLifecycle(writer, SECRET, clock)
    try:
        await writer.create_team(TeamRecord("t", "T"), clock())
        issued = await keys.create(key(team="t"))
        await directory.start()
        assert directory.by_hash(keys.hash(issued.secret)).usable_at(clock())
        await keys.revoke(issued.entry.record.key_id)
        for _ in range(100):  # bounded: the background refresh runs every 0.05 s
            record = directory.by_hash(keys.hash(issued.secret))
            if not record.usable_at(clock()):
                break
            await asyncio.sleep(0.05)
        assert not directory.by_hash(keys.hash(issued.secret)).usable_at(clock())
        assert directory.version == await reader.version()
    finally:
        await directory.stop()
        await writer.close()
        await reader.close()


async def test_a_team_with_live_keys_is_not_deleted_and_names_them(database_url):
    store = await opened(database_url)
    clock = Clock()
    keys = KeyLifecycle(store, SECRET, clock)
    try:
        await store.create_team(TeamRecord("t", "T"), clock())
        a = await keys.create(key(team="t", name="a"))
        b = await keys.create(key(team="t", name="b"))
        await keys.revoke(b.entry.record.key_id)
        version = await store.version()
        with pytest.raises(Conflict) as refused:
            await store.delete_team("t")
        assert a.entry.record.key_id in refused.value.message and b.entry.record.key_id not in refused.value.message
        assert await store.version() == version
        await keys.revoke(a.entry.record.key_id)
        await store.delete_team("t")
        with pytest.raises(NotFound):
            await store.team("t")
        assert await store.keys() == []
    finally:
        await store.close()
