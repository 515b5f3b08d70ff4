"""PriorityGate: strict priority, bounded queues, shedding, deadlines, cancellation, Retry-After.

No test here measures time: waiters are driven by releases and an injected clock.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sits.errors import Overloaded, UnprocessableRequest
from sits.pipeline.admission import AdmissionConfig, GatePolicy, PriorityGate, PriorityGates, gate_policy, limiter_factory
from sits.pipeline.priority import (
    PRIORITY_HEADER,
    Priority,
    PriorityRules,
    key_digest,
    parse_priority_header,
    priority_rules,
)
from sits.state.concurrency_limit import AimdLimiter, FixedLimiter, GradientLimiter

P0, P1, P2 = Priority.P0, Priority.P1, Priority.P2


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Limit:
    """A limit the test turns, as an adaptive limiter would."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self) -> int:
        return self.value


def make_gate(limit: int = 1, clock: FakeClock | None = None, **policy) -> tuple[PriorityGate, Limit, FakeClock]:
    lim, clk = Limit(limit), clock or FakeClock()
    return PriorityGate(lim, GatePolicy(**policy), clk, name="m1"), lim, clk


async def settle(condition, rounds: int = 50) -> None:
    """Let queued tasks run until `condition()` holds (bounded by loop turns, not by time)."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    assert condition()


def retry_after(exc: Overloaded) -> int:
    headers = dict(exc.headers)
    assert "retry-after" in headers
    return int(headers["retry-after"])


# --- the header and the rules -----------------------------------------------------------------

@pytest.mark.parametrize("value,expected", [
    ("P0", P0), ("p0", P0), ("0", P0), ("realtime", P0), ("Real-Time", P0),
    ("P1", P1), ("1", P1), ("interactive", P1), (" P1 ", P1),
    ("P2", P2), ("2", P2), ("BATCH", P2),
])
def test_header_spellings(value, expected):
    assert parse_priority_header(value) is expected


@pytest.mark.parametrize("value", ["", "P3", "-1", "urgent", "high", "P0,P1", "x" * 500])
def test_an_invalid_header_is_422_naming_the_header(value):
    with pytest.raises(UnprocessableRequest) as info:
        parse_priority_header(value)
    assert info.value.http_status == 422
    assert info.value.param == PRIORITY_HEADER and PRIORITY_HEADER in info.value.message
    assert len(info.value.message) < 200  # a huge header is not echoed whole


BATCH_KEY, RT_KEY = "sk-batch", "sk-rt"
RULES = PriorityRules(default=P1, by_model={"bulk-model": P2},
                      by_key_sha256={key_digest(BATCH_KEY): P2, key_digest(RT_KEY): P0})


@pytest.mark.parametrize("header,key,model,expected", [
    (None, None, "m", P1),  # the default
    (None, None, "bulk-model", P2),  # by route (model)
    (None, BATCH_KEY, "m", P2),  # by key
    (None, RT_KEY, "bulk-model", P0),  # a key's class beats the model's
    ("P0", None, "bulk-model", P0),  # the header beats the model's class
    ("batch", RT_KEY, "m", P2),  # a header may always ask for less
    ("P0", BATCH_KEY, "m", P2),  # but not for more than its key's class (ceiling)
    ("P1", "sk-unknown", "m", P1),
])
def test_priority_rules(header, key, model, expected):
    assert RULES.resolve(header, key, model) is expected


def test_without_the_ceiling_the_header_wins():
    rules = PriorityRules(by_key_sha256={key_digest(BATCH_KEY): P2}, key_is_ceiling=False)
    assert rules.resolve("P0", BATCH_KEY, "m") is P0


def test_rules_reject_a_bad_header_even_with_a_key():
    with pytest.raises(UnprocessableRequest):
        RULES.resolve("P9", RT_KEY, "m")


# --- admission -----------------------------------------------------------------------------

async def test_admits_up_to_the_limit_and_release_is_idempotent():
    gate, _, _ = make_gate(limit=2)
    a, b = await gate.acquire(P1), await gate.acquire(P0)
    assert gate.in_flight == 2 and a.waited_s == 0.0
    a.release()
    a.release()
    assert gate.in_flight == 1
    b.release()
    assert gate.in_flight == 0


async def test_try_acquire_admits_only_when_a_slot_is_free_and_nobody_waits():
    gate, _, _ = make_gate(limit=1)
    first = gate.try_acquire(P1)
    assert first is not None and gate.in_flight == 1
    assert gate.try_acquire(P0) is None  # full: the caller must queue with acquire()
    queued = asyncio.create_task(gate.acquire(P2))
    await settle(lambda: gate.queued(P2) == 1)
    first.release()  # the slot goes to the waiter, not to a later try_acquire
    ticket = await queued
    assert gate.try_acquire(P0) is None and gate.in_flight == 1
    ticket.release()
    late = gate.try_acquire(P0)
    assert late is not None and gate.snapshot().classes[P0].admitted == 1
    late.release()
    assert gate.in_flight == 0


async def test_strict_priority_when_slots_free():
    gate, _, _ = make_gate(limit=1)
    holder = await gate.acquire(P1)
    order: list[str] = []

    async def request(name: str, priority: Priority) -> None:
        ticket = await gate.acquire(priority)
        order.append(name)
        ticket.release()

    arrivals = [("a", P2), ("b", P1), ("c", P2), ("d", P0), ("e", P1), ("f", P0)]
    tasks = []
    for name, priority in arrivals:
        tasks.append(asyncio.create_task(request(name, priority)))
        await settle(lambda n=len(tasks): gate.queued() == n)
    holder.release()
    await asyncio.gather(*tasks)
    assert order == ["d", "f", "b", "e", "a", "c"]  # P0, then P1, then P2; FIFO inside a class


async def test_an_urgent_arrival_goes_ahead_of_a_queue_of_less_urgent_work():
    gate, lim, _ = make_gate(limit=1)
    holder = await gate.acquire(P2)
    batch = [asyncio.create_task(gate.acquire(P2)) for _ in range(3)]
    await settle(lambda: gate.queued(P2) == 3)
    urgent = asyncio.create_task(gate.acquire(P0))
    await settle(lambda: gate.queued(P0) == 1)
    holder.release()
    ticket = await urgent
    assert ticket.priority is P0 and ticket.waited_s == 0.0  # the fake clock did not move
    assert gate.queued(P2) == 3
    for task in batch:
        task.cancel()
    await asyncio.gather(*batch, return_exceptions=True)


async def test_slot_share_keeps_headroom_for_urgent_classes():
    gate, _, _ = make_gate(limit=10)  # P2 may fill 80%: 8 slots
    batch = [await gate.acquire(P2) for _ in range(8)]
    ninth = asyncio.create_task(gate.acquire(P2))
    await settle(lambda: gate.queued(P2) == 1)
    urgent = await gate.acquire(P0)  # no wait: the reserved headroom
    interactive = await gate.acquire(P1)
    assert gate.in_flight == 10
    batch[0].release()
    await asyncio.sleep(0)
    assert not ninth.done()  # 9 in flight still exceeds P2's 8
    urgent.release()
    interactive.release()
    await ninth
    for t in batch[1:]:
        t.release()


async def test_class_queue_bound_gives_429_with_retry_after():
    gate, _, _ = make_gate(limit=1, queue_limits=(1, 1, 0))
    holder = await gate.acquire(P1)
    queued = asyncio.create_task(gate.acquire(P1))
    await settle(lambda: gate.queued(P1) == 1)
    with pytest.raises(Overloaded) as info:
        await gate.acquire(P1)
    assert info.value.http_status == 429 and info.value.code == "queue_full"
    assert retry_after(info.value) >= 1
    with pytest.raises(Overloaded) as info:
        await gate.acquire(P2)  # P2 may not queue at all here
    assert info.value.code == "queue_full"
    assert gate.snapshot().classes[P1].rejected == 1
    holder.release()
    (await queued).release()


async def test_shedding_takes_the_newest_of_the_least_urgent_class_first():
    gate, _, _ = make_gate(limit=1, max_queued=3)
    holder = await gate.acquire(P0)
    p1 = asyncio.create_task(gate.acquire(P1))
    p2_old = asyncio.create_task(gate.acquire(P2))
    await settle(lambda: gate.queued() == 2)
    p2_new = asyncio.create_task(gate.acquire(P2))
    await settle(lambda: gate.queued() == 3)

    with pytest.raises(Overloaded) as info:  # full, and nothing less urgent than P2 to displace
        await gate.acquire(P2)
    assert (info.value.http_status, info.value.code) == (429, "queue_full")

    p0_a = asyncio.create_task(gate.acquire(P0))
    await settle(lambda: p2_new.done())
    with pytest.raises(Overloaded) as info:
        await p2_new
    assert (info.value.http_status, info.value.code) == (429, "shed") and retry_after(info.value) >= 1
    assert not p2_old.done()

    p1_b = asyncio.create_task(gate.acquire(P1))  # P1 displaces the remaining P2
    await settle(lambda: p2_old.done())
    with pytest.raises(Overloaded):
        await p2_old

    p0_b = asyncio.create_task(gate.acquire(P0))  # no P2 left: the newest P1 goes
    await settle(lambda: p1_b.done())
    with pytest.raises(Overloaded):
        await p1_b
    assert not p1.done()
    snap = gate.snapshot()
    assert (snap.classes[P2].shed, snap.classes[P1].shed, snap.classes[P0].shed) == (2, 1, 0)

    holder.release()
    for task in (p0_a, p0_b, p1):
        (await task).release()
    assert gate.in_flight == 0 and gate.queued() == 0


async def test_queued_work_past_its_deadline_never_reaches_the_backend():
    gate, _, clock = make_gate(limit=1)
    backend_calls = 0

    async def request(priority: Priority, deadline: float) -> None:
        nonlocal backend_calls
        async with gate.admit(priority, deadline):
            backend_calls += 1

    holder = await gate.acquire(P1)
    late = asyncio.create_task(request(P2, deadline=10.0))
    on_time = asyncio.create_task(request(P2, deadline=100.0))
    await settle(lambda: gate.queued() == 2)
    clock.now = 11.0
    holder.release()
    with pytest.raises(Overloaded) as info:
        await late
    assert (info.value.http_status, info.value.code) == (503, "queue_timeout") and retry_after(info.value) >= 1
    await on_time
    assert backend_calls == 1  # only the request still within its deadline
    assert gate.in_flight == 0
    assert gate.snapshot().classes[P2].expired == 1


async def test_a_deadline_already_past_is_refused_at_once():
    gate, _, clock = make_gate(limit=5)
    clock.now = 50.0
    with pytest.raises(Overloaded) as info:
        await gate.acquire(P0, deadline=49.0)
    assert info.value.code == "queue_timeout" and gate.in_flight == 0


async def test_a_waiter_nobody_releases_for_still_times_out():
    gate = PriorityGate(lambda: 1, GatePolicy(), time.monotonic)
    holder = await gate.acquire(P1)
    with pytest.raises(Overloaded) as info:
        await gate.acquire(P1, deadline=time.monotonic() + 0.01)  # the gate's timer, not a slot, ends it
    assert info.value.code == "queue_timeout" and gate.queued() == 0
    holder.release()
    assert gate.in_flight == 0


async def test_cancelled_while_queued_leaves_no_slot_behind():
    gate, _, _ = make_gate(limit=1)
    holder = await gate.acquire(P1)
    waiting = asyncio.create_task(gate.acquire(P1))
    await settle(lambda: gate.queued() == 1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert gate.queued() == 0
    holder.release()
    assert gate.in_flight == 0
    assert gate.snapshot().classes[P1].cancelled == 1
    (await gate.acquire(P1)).release()  # the slot is there for the next caller


async def test_cancelled_after_the_slot_was_granted_gives_it_back():
    gate, _, _ = make_gate(limit=1)
    holder = await gate.acquire(P1)
    waiting = asyncio.create_task(gate.acquire(P1))
    await settle(lambda: gate.queued() == 1)
    holder.release()  # grants the slot to `waiting`, which has not resumed yet
    assert gate.in_flight == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert gate.in_flight == 0


async def test_cancelled_and_then_popped_by_a_release_is_counted_once():
    gate, _, _ = make_gate(limit=1)
    holder = await gate.acquire(P1)
    waiting = asyncio.create_task(gate.acquire(P1))
    await settle(lambda: gate.queued() == 1)
    waiting.cancel()
    holder.release()  # before the cancelled task runs its handler
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert gate.in_flight == 0 and gate.snapshot().classes[P1].cancelled == 1


async def test_admit_releases_when_the_block_raises():
    gate, _, _ = make_gate(limit=1)
    with pytest.raises(RuntimeError):
        async with gate.admit(P1):
            raise RuntimeError("backend failed")
    assert gate.in_flight == 0


async def test_a_raised_limit_takes_effect_for_queued_work():
    gate, lim, _ = make_gate(limit=1)
    holder = await gate.acquire(P1)
    waiting = [asyncio.create_task(gate.acquire(P1)) for _ in range(2)]
    await settle(lambda: gate.queued() == 2)
    lim.value = 3
    gate.wake()
    tickets = await asyncio.gather(*waiting)
    assert gate.in_flight == 3
    for t in (holder, *tickets):
        t.release()


async def test_a_lowered_limit_holds_new_work_until_in_flight_drains_below_it():
    gate, lim, _ = make_gate(limit=3)
    held = [await gate.acquire(P1) for _ in range(3)]
    lim.value = 1
    waiting = asyncio.create_task(gate.acquire(P0))
    await settle(lambda: gate.queued() == 1)
    held[0].release()
    held[1].release()
    await asyncio.sleep(0)
    assert not waiting.done()  # one still in flight, and the limit is 1
    held[2].release()
    (await waiting).release()


async def test_a_limit_of_zero_is_503_no_capacity():
    gate, _, _ = make_gate(limit=0)
    with pytest.raises(Overloaded) as info:
        await gate.acquire(P0)
    assert (info.value.http_status, info.value.code) == (503, "no_capacity") and retry_after(info.value) == 1


async def test_retry_after_follows_the_drain_rate():
    gate, _, clock = make_gate(limit=1, queue_limits=(64, 30, 64), max_retry_after_s=60)
    for i in range(11):  # 10 completions a second
        clock.now = i * 0.1
        (await gate.acquire(P1)).release()
    holder = await gate.acquire(P1)
    waiting = [asyncio.create_task(gate.acquire(P1)) for _ in range(30)]
    await settle(lambda: gate.queued() == 30)
    with pytest.raises(Overloaded) as info:
        await gate.acquire(P1)
    assert retry_after(info.value) == 4  # 31 ahead at 10/s
    clock.now = 1000.0  # nothing drained since: the estimate falls, capped at the policy's maximum
    with pytest.raises(Overloaded) as info:
        await gate.acquire(P1)
    assert retry_after(info.value) == 60
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    holder.release()


async def test_snapshot_counts_waits():
    gate, _, clock = make_gate(limit=1)
    holder = await gate.acquire(P0)
    waiting = asyncio.create_task(gate.acquire(P2))
    await settle(lambda: gate.queued() == 1)
    clock.now = 2.5
    holder.release()
    ticket = await waiting
    assert ticket.waited_s == 2.5
    snap = gate.snapshot()
    p2 = snap.classes[P2]
    assert (p2.admitted, p2.waited, p2.wait_total_s, p2.wait_max_s, p2.queued) == (1, 1, 2.5, 2.5, 0)
    assert snap.in_flight == 1 and snap.limit == 1 and snap.classes[P0].admitted == 1
    ticket.release()


def test_policy_deadline_is_the_class_bound_or_sooner():
    policy = GatePolicy(max_wait_s=(1.0, 10.0, 100.0))
    assert policy.deadline(P2, now=5.0) == 105.0
    assert policy.deadline(P2, now=5.0, requested=7.0) == 7.0


@pytest.mark.parametrize("kwargs", [
    {"slot_share": (0.5, 1.0, 1.0)}, {"slot_share": (1.0, 1.0, 0.0)}, {"queue_limits": (-1, 1, 1)},
    {"max_wait_s": (0.0, 1.0, 1.0)}, {"max_retry_after_s": 0},
])
def test_policy_rejects_nonsense(kwargs):
    with pytest.raises(ValueError):
        GatePolicy(**kwargs)


async def test_gates_are_per_model():
    gates = PriorityGates(lambda model: (lambda: 2 if model == "a" else 1), clock=FakeClock())
    assert gates.get("a") is gates.get("a") and gates.get("a") is not gates.get("b")
    await gates.get("b").acquire(P1)
    assert set(gates.snapshot()) == {"a", "b"} and gates.snapshot()["b"].in_flight == 1


# --- invariants under random traffic -----------------------------------------------------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("arrive"), st.sampled_from(list(Priority))),
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("cancel"), st.integers(0, 50)),
    st.tuples(st.just("limit"), st.integers(0, 6)),
), max_size=60)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_invariants_hold_under_any_sequence(ops):
    asyncio.run(_run_ops(ops))


async def _run_ops(ops) -> None:
    policy = GatePolicy(queue_limits=(2, 3, 4), max_queued=5)
    gate = PriorityGate(lim := Limit(2), policy, FakeClock())
    tickets: list = []
    tasks: list[asyncio.Task] = []

    async def arrive(priority: Priority) -> None:
        tickets.append(await gate.acquire(priority))

    for seq, (op, arg) in enumerate(ops):
        if op == "arrive":
            tasks.append(asyncio.create_task(arrive(arg)))
        elif op == "release" and tickets:
            tickets.pop(arg % len(tickets)).release()
        elif op == "cancel" and tasks:
            tasks[arg % len(tasks)].cancel()
        elif op == "limit":
            lim.value = arg
            gate.wake()
        for _ in range(3):
            await asyncio.sleep(0)
        assert all(gate.queued(p) <= policy.queue_limits[p] for p in Priority)
        assert gate.queued() <= policy.max_queued
        assert gate.in_flight == sum(1 for t in tickets if t._held)
        for p in Priority:  # work-conserving and strict: a class waits only while it may not start
            if gate.queued(p):
                assert gate.in_flight >= policy.allowed(p, lim.value)
                assert all(gate.queued(q) == 0 or gate.in_flight >= policy.allowed(q, lim.value) for q in Priority)
    lim.value = 100
    gate.wake()
    for _ in range(5):
        await asyncio.sleep(0)
    await asyncio.gather(*tasks, return_exceptions=True)
    for t in tickets:
        t.release()
    assert gate.in_flight == 0 and gate.queued() == 0


# --- configuration ---------------------------------------------------------------------------

def test_config_defaults_build_working_objects():
    config = AdmissionConfig()
    assert gate_policy(config) == GatePolicy()
    assert priority_rules(config).default is P1
    assert isinstance(limiter_factory(config)(), GradientLimiter)


def test_config_from_yaml_shaped_data():
    digest = key_digest("sk-batch")
    config = AdmissionConfig.model_validate({
        "default_priority": "interactive",
        "priority_by_model": {"nightly": "batch", "voice": 0},
        "priority_by_key_sha256": {digest: "P2"},
        "queue_size": {"P0": 8, "P1": 16, "P2": 32},
        "max_queued": 40,
        "slot_share": {"P2": 0.5},
        "max_wait_s": {"P0": 1.0},
        "limiter": {"type": "aimd", "initial": 8, "min": 2, "max": 64, "latency_target_s": 1.5},
    })
    rules, policy = priority_rules(config), gate_policy(config)
    assert rules.resolve(None, "sk-batch", "voice") is P2 and rules.resolve(None, None, "voice") is P0
    assert policy.queue_limits == (8, 16, 32) and policy.slot_share == (1.0, 1.0, 0.5)
    assert policy.max_wait_s == (1.0, 30.0, 120.0)
    limiter = limiter_factory(config)()
    assert isinstance(limiter, AimdLimiter) and limiter.limit == 8
    fixed = limiter_factory(AdmissionConfig.model_validate({"limiter": {"type": "fixed", "limit": 7}}))()
    assert isinstance(fixed, FixedLimiter) and fixed.limit == 7


@pytest.mark.parametrize("raw,field", [
    ({"default_priority": "urgent"}, "default_priority"),
    ({"priority_by_key_sha256": {"sk-plain-key": "P0"}}, "priority_by_key_sha256"),
    ({"slot_share": {"P0": 0.5}}, "slot_share"),
    ({"limiter": {"type": "gradient", "initial": 2, "min": 4}}, "min <= initial"),
    ({"limiter": {"type": "pid"}}, "limiter"),
    ({"queue_size": {"P3": 1}}, "P3"),
    ({"surprise": 1}, "surprise"),
])
def test_config_rejects_bad_values_naming_them(raw, field):
    with pytest.raises(ValidationError) as info:
        AdmissionConfig.model_validate(raw)
    assert field in str(info.value)
