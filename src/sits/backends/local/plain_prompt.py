"""Chat messages as a plain transcript, for base models that have no chat template.

Gemma-3-270M (the base model) continues text; a "Role: text" transcript ending in
"Assistant:" is the prompt shape it completes most sensibly, and a stop on the
next speaker's turn keeps it from writing the user's lines too.
"""

from __future__ import annotations

from collections.abc import Sequence

from sits.backends.local.protocol import ChatMessage

SPEAKERS = {
    "system": "System",
    "developer": "System",
    "user": "User",
    "assistant": "Assistant",
    "tool": "Tool",
}

# The model invents the next turns itself; cut at the first one.
TRANSCRIPT_STOPS: tuple[str, ...] = ("\nUser:", "\nSystem:")


def render_transcript(messages: Sequence[ChatMessage]) -> str:
    """Render messages as "System: ...\\nUser: ...\\nAssistant:" (no trailing space)."""
    lines = [f"{SPEAKERS[m.role]}: {m.content.strip()}" for m in messages]
    lines.append("Assistant:")
    return "\n".join(lines)
