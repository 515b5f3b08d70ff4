"""The semilattice laws every CRDT merge must obey: commutative, associative, idempotent."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.state.crdt.strategies import ALL_KINDS


@pytest.mark.parametrize("kind", sorted(ALL_KINDS))
def test_merge_is_commutative_associative_idempotent(kind):
    values = ALL_KINDS[kind]

    @settings(max_examples=300, deadline=None)
    @given(values, values, values)
    def laws(a, b, c):
        assert a.merge(b) == b.merge(a)
        assert a.merge(b).merge(c) == a.merge(b.merge(c))
        assert a.merge(a) == a
        assert a.merge(b).merge(b) == a.merge(b)

    laws()


@pytest.mark.parametrize("kind", sorted(ALL_KINDS))
def test_merge_only_grows_knowledge(kind):
    """Merging in something already absorbed changes nothing (the merge is a join, not an overwrite)."""
    values = ALL_KINDS[kind]

    @settings(max_examples=200, deadline=None)
    @given(values, values)
    def absorbs(a, b):
        joined = a.merge(b)
        assert joined.merge(a) == joined
        assert joined.merge(b) == joined

    absorbs()


@given(st.data())
@settings(max_examples=50, deadline=None)
def test_version_vector_order_agrees_with_merge(data):
    from tests.state.crdt.strategies import gcounters

    a, b = data.draw(gcounters()), data.draw(gcounters())
    joined = a.merge(b)
    assert a.compare(joined) in ("before", "equal")
    assert joined.compare(a) in ("after", "equal")
    order = a.compare(b)
    assert order == {"before": "after", "after": "before", "equal": "equal", "concurrent": "concurrent"}[b.compare(a)]
