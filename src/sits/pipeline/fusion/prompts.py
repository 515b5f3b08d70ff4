"""The messages a workflow sends: the client's conversation with its files replaced by the
parsed documents, and the judge prompts (with how their answers are read)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_JUDGE_SOURCE_CHARS = 12_000
_VERDICT = re.compile(r"\b(PASS|FAIL)\b", re.I)
_PICK = re.compile(r"\b(\d{1,2})\b")


def with_documents(messages: Sequence[dict[str, Any]], rendered: dict[str, str],
                   instructions: str | None) -> list[dict[str, Any]]:
    """`messages` with every file part at path p replaced by the text `rendered[p]`; content
    lists that are all text become one string (servers without content parts read it too)."""
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                path = f"messages[{i}].content[{j}]"
                if path in rendered:
                    parts.append({"type": "text", "text": rendered[path]})
                else:
                    parts.append(part)
            if all(isinstance(p, dict) and p.get("type") == "text" for p in parts):
                content = "\n\n".join(str(p.get("text", "")) for p in parts)
            else:
                content = parts
        out.append({**message, "content": content})  # tool_calls, tool_call_id, name... pass as sent
    return out


def client_text(messages: Sequence[dict[str, Any]]) -> str:
    """The text the client itself wrote (system and user turns): part of the verifier's source."""
    parts = []
    for message in messages:
        if message.get("role") not in ("system", "user", "developer"):
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return "\n".join(parts)


def question(messages: Sequence[dict[str, Any]]) -> str:
    """The last user turn's text."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return client_text([message])
    return ""


def verify_judge_messages(source: str, ask: str, draft: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You check an answer against its source. Reply PASS if every fact and "
                                      "number in the answer is supported by the source, else FAIL; then one "
                                      "sentence why."},
        {"role": "user", "content": f"SOURCE:\n{source[:_JUDGE_SOURCE_CHARS]}\n\nQUESTION:\n{ask}\n\n"
                                    f"ANSWER:\n{draft}\n\nVerdict (PASS or FAIL):"},
    ]


def read_verdict(reply: str) -> float | None:
    m = _VERDICT.search(reply)
    if m is None:
        return None
    return 1.0 if m.group(1).upper() == "PASS" else 0.0


def panel_judge_messages(source: str, ask: str, drafts: Sequence[str]) -> list[dict[str, Any]]:
    numbered = "\n\n".join(f"[{i}]\n{d}" for i, d in enumerate(drafts, start=1))
    return [
        {"role": "system", "content": "You pick the best of several candidate answers: the one that answers "
                                      "the question correctly and is supported by the source. Reply with the "
                                      "candidate's number only."},
        {"role": "user", "content": f"SOURCE:\n{source[:_JUDGE_SOURCE_CHARS]}\n\nQUESTION:\n{ask}\n\n"
                                    f"CANDIDATES:\n{numbered}\n\nBest candidate number:"},
    ]


def read_pick(reply: str, count: int) -> int | None:
    for m in _PICK.finditer(reply):
        n = int(m.group(1))
        if 1 <= n <= count:
            return n
    return None
