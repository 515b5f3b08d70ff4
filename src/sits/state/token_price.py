"""What a model's tokens cost: USD per million tokens of each kind the upstream reports in `usage`.

Here in state/ so the config (control/), the routing table and the tenants' pricing can share it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens of each kind, as the upstream reports them in `usage`."""

    input: float = 0.0
    cached_input: float | None = None  # None: cached input tokens are priced as input
    output: float = 0.0
    reasoning: float | None = None  # None: reasoning tokens are priced as output

    @classmethod
    def per_thousand(cls, input_usd: float | None, output_usd: float | None) -> Price | None:
        """The legacy `cost_per_1k_input/output` fields as a price (None when neither is set)."""
        if input_usd is None and output_usd is None:
            return None
        return cls(input=(input_usd or 0.0) * 1000, output=(output_usd or 0.0) * 1000)
