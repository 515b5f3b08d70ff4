"""Request and answer ids (`SerialIds`: unique, cheap) and ids of stored resources (`RandomIds`: also
unguessable, from the system's random source, drawn for many ids at once)."""

from __future__ import annotations

import re

from sits.api.dispatch import RandomIds, SerialIds


def test_random_ids_are_distinct_hex_of_their_size_across_refills():
    ids = RandomIds("resp_", 12, batch=8)
    made = [ids.next() for _ in range(100)]  # refilled twelve times along the way
    assert len(set(made)) == 100
    assert all(re.fullmatch(r"resp_[0-9a-f]{24}", i) for i in made)


def test_two_makers_of_random_ids_share_nothing():
    one, other = RandomIds("resp_", 12), RandomIds("resp_", 12)
    assert {one.next() for _ in range(50)}.isdisjoint({other.next() for _ in range(50)})


def test_serial_ids_count_up_after_a_prefix_of_their_own():
    one, other = SerialIds("msg_"), SerialIds("msg_")
    first, second = one.next(), one.next()
    assert first.startswith("msg_") and first[:-1] == second[:-1] and first != second
    assert other.next().rsplit("-", 1)[0] != first.rsplit("-", 1)[0]
