"""Chat messages as a transcript for base models without a chat template."""

from __future__ import annotations

import pytest

from sits.backends.local.plain_prompt import TRANSCRIPT_STOPS, render_transcript
from sits.backends.local.protocol import ChatMessage


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([("user", "Hi")], "User: Hi\nAssistant:"),
        (
            [("system", "Be brief."), ("user", " Hi \n"), ("assistant", "Hello."), ("user", "Why?")],
            "System: Be brief.\nUser: Hi\nAssistant: Hello.\nUser: Why?\nAssistant:",
        ),
        ([("developer", "Rules"), ("tool", "42")], "System: Rules\nTool: 42\nAssistant:"),
    ],
)
def test_render_transcript(messages: list[tuple[str, str]], expected: str) -> None:
    assert render_transcript([ChatMessage(role, text) for role, text in messages]) == expected


def test_transcript_stops_cut_the_next_user_turn() -> None:
    assert "\nUser:" in TRANSCRIPT_STOPS
