"""Prometheus figures of keys, limits and budgets, per team and model, with bounded label values.

Registered on the gateway's own registry next to `GatewayMetrics`; recording is a dict update. Team
and model labels each pass through `BoundedLabels` (the first N distinct values, then "other"), so
neither many teams nor invented model names can grow the exposition without bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from sits.state.routing_table import RoutingTable
from sits.telemetry.metrics import BoundedLabels, Tally
from sits.tenants.usage import Usage

OUTCOMES = frozenset({"admitted", "unauthorized", "forbidden", "rpm", "tpm", "concurrency", "budget"})


class _Series:
    """The series one (team, model) pair records on, found once."""

    __slots__ = ("table", "spend", "input", "cached", "output", "reasoning")

    def __init__(self, table: RoutingTable, spend: Tally, tokens: Tally, team: str, model: str) -> None:
        self.table = table
        self.spend = spend.count((team, model))
        self.input, self.cached = tokens.count((team, model, "input")), tokens.count((team, model, "cached_input"))
        self.output, self.reasoning = tokens.count((team, model, "output")), tokens.count((team, model, "reasoning"))


class TenantMetrics:
    """A Prometheus collector by its `collect()` (registered on the gateway's registry), not by inheritance:
    the module is compiled, and a compiled class subclasses no third-party class (docs/hot-path.md)."""

    def __init__(self, limiter_mode: Callable[[], str], redis_losses: Callable[[], int],
                 max_teams: int = 100, max_models: int = 256,
                 credits: Callable[[], tuple[int, int, int]] | None = None) -> None:
        """`credits`: the limiter's grants given, grants refused and requests admitted on credit (None:
        credits off, no such series)."""
        self._team = BoundedLabels(max_teams)
        self._model = BoundedLabels(max_models)
        self._limiter_mode = limiter_mode
        self._redis_losses = redis_losses
        self._credits = credits
        self.requests = Tally("sits_tenant_requests", "Data-plane requests by team, model and what the key "
                              "gate decided (admitted, or the limit that refused it).", ("team", "model", "outcome"))
        self.spend = Tally("sits_tenant_spend_usd", "USD spent, by team and model (cache hits cost 0).",
                           ("team", "model"))
        self.tokens = Tally("sits_tenant_tokens", "Tokens by team, model and kind (input, cached_input, output, "
                            "reasoning).", ("team", "model", "kind"))
        self.soft_budget = Tally("sits_tenant_budget_soft_exceeded", "Requests admitted over a soft budget, by "
                                 "team and scope (key or team).", ("team", "scope"))
        self.local_admissions = Tally("sits_limits_local_admissions", "Requests whose limits were checked in this "
                                      "replica alone (Redis unreachable or not configured).", ("mode",))
        self._tallies = (self.requests, self.spend, self.tokens, self.soft_budget, self.local_admissions)
        self._series: dict[tuple[str, str], _Series] = {}

    def used(self, team_id: str, model: str, table: RoutingTable, usage: Usage, cost: float) -> None:
        """What one finished request used: spend and tokens by kind, for its team and model."""
        series = self._series.get((team_id, model))
        if series is None or series.table is not table:
            if len(self._series) > 4096:
                self._series.clear()
            label = model if model in table.models or model in table.aliases else "unknown"
            series = self._series[(team_id, model)] = _Series(table, self.spend, self.tokens, self.team(team_id),
                                                              self._model(label))
        if cost:
            series.spend.value += cost
        if usage.input_tokens:
            series.input.value += usage.input_tokens
        if usage.output_tokens:
            series.output.value += usage.output_tokens
        if usage.cached_input_tokens:
            series.cached.value += usage.cached_input_tokens
        if usage.reasoning_tokens:
            series.reasoning.value += usage.reasoning_tokens

    def team(self, team_id: str | None) -> str:
        return self._team(team_id or "none")

    def model(self, name: str) -> str:
        return self._model(name)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        for tally in self._tallies:
            yield tally.family()
        shared = GaugeMetricFamily("sits_limits_shared", "1 while limits and budgets are counted in Redis across "
                                   "replicas; 0 while this replica enforces its share alone.")
        shared.add_metric([], 1.0 if self._limiter_mode() == "redis" else 0.0)
        yield shared
        losses = CounterMetricFamily("sits_limits_redis_losses", "Times this replica lost Redis and fell back to "
                                     "its share of every limit.")
        losses.add_metric([], float(self._redis_losses()))
        yield losses
        if self._credits is None:
            return
        given, refused, on_credit = self._credits()
        grants = CounterMetricFamily("sits_limits_credit_grants", "Per-replica credit grants Redis answered, by "
                                     "outcome (docs/limits-and-budgets.md).", labels=["outcome"])
        grants.add_metric(["given"], float(given))
        grants.add_metric(["refused"], float(refused))
        yield grants
        admitted = CounterMetricFamily("sits_limits_credit_admissions", "Requests admitted on a per-replica "
                                       "credit, with no Redis call of their own.")
        admitted.add_metric([], float(on_credit))
        yield admitted

    def describe(self) -> list[object]:
        return []
