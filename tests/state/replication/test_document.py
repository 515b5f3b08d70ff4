"""The cluster document is one CRDT: the laws hold for the whole, and it survives the wire unchanged."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from sits.state.crdt import Stamp
from sits.state.replication.document import ClusterDoc
from sits.state.replication.records import AliasRoute
from sits.state.replication.wire import WireError, decode, encode
from tests.state.replication.docs import alias_doc, docs


@settings(max_examples=300, deadline=None)
@given(docs, docs, docs)
def test_document_merge_laws(a, b, c):
    assert a.merge(b) == b.merge(a)
    assert a.merge(b).merge(c) == a.merge(b.merge(c))
    assert a.merge(a) == a


@settings(max_examples=200, deadline=None)
@given(docs)
def test_wire_round_trip_is_exact(doc):
    origin, back = decode(encode(doc, "r1"))
    assert origin == "r1" and back == doc
    assert back.state_hash() == doc.state_hash()


@settings(max_examples=100, deadline=None)
@given(docs, docs)
def test_state_hash_agrees_exactly_when_the_shared_parts_agree(a, b):
    same_shared = (a.aliases, a.registry) == (b.aliases, b.registry)
    assert (a.state_hash() == b.state_hash()) == same_shared


def test_state_hash_ignores_statuses_and_counters():
    base = alias_doc("chat", AliasRoute("m@v2", "m@v1"), Stamp(5, 0, "r1"))
    from sits.state.crdt import GCounter

    assert base.merge(ClusterDoc(served=GCounter({"r2": 9}))).state_hash() == base.state_hash()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b'{"version": 1}',
        b'{"version": 1, "origin": "r1", "extra": 1}',
        b'{"version": 1, "origin": "r1", "aliases": {"a": {"s": [1, 0], "v": null}}}',
        b'{"version": 1, "origin": "r1", "aliases": {"a": {"s": [-1, 0, "r1"], "v": null}}}',
        b'{"version": 1, "origin": "r1", "aliases": {"a": {"s": [1, 0, "r1"], "v": {"target": ""}}}}',
        b'{"version": 1, "origin": "r1", "replicas": {"r2": {"s": [1, 0, "r2"], "v": {"progress": {}}}}}',
        b'{"version": 1, "origin": "r1", "circuits": {"e": {"s": [1, 0, "r1"], "v": {"state": "ajar"}}}}',
    ],
)
def test_malformed_messages_are_refused(data):
    with pytest.raises(WireError):
        decode(data)


def test_oversized_messages_are_refused_before_parsing():
    with pytest.raises(WireError, match="exceeds"):
        decode(b" " * (8 * 1024 * 1024 + 1))
