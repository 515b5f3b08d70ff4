from __future__ import annotations

import pytest

from sits.understanding.tier_rule import choose_tier, nearest_tiers


@pytest.mark.parametrize(("prompt", "tier"), [
    ("What is the capital of France?", "tiny"),
    ("hi", "tiny"),
    ("Fix this:\n```python\ndef f(x): return x+\n```", "base"),
    ("What is 17 * 23 + 4?", "base"),
    ("Who wrote Hamlet? When? Why does it matter?", "base"),
    ("word " * 200, "base"),
    ("x" * 5000, "heavy"),
])
def test_choose_tier(prompt, tier):
    assert choose_tier(prompt).tier == tier


def test_nearest_tiers_prefers_the_larger_neighbour():
    assert nearest_tiers("base") == ["base", "heavy", "tiny"]
    assert nearest_tiers("heavy") == ["heavy", "base", "tiny"]
    assert nearest_tiers("tiny") == ["tiny", "base", "heavy"]
