"""Token usage in each wire format, from and to the chat-completions `usage` object.

Chat usage counts every prompt token in `prompt_tokens`; the cached part is in
`prompt_tokens_details.cached_tokens` (OpenAI's field) and the part written to a prompt cache in
`prompt_tokens_details.cache_creation_tokens` (SITS's name for Anthropic's cache writes). Anthropic's
`input_tokens` counts only the uncached rest.
"""

from __future__ import annotations

from typing import Any


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def chat_counts(usage: Any) -> tuple[int, int, int, int, int]:
    """(prompt, completion, cached, cache_creation, reasoning) from a chat `usage` object (zeros if absent)."""
    if not isinstance(usage, dict):
        return 0, 0, 0, 0, 0
    counts: dict[str, Any] = usage  # a dict: its reads compile to dict operations, not method calls
    prompt, completion = _int(counts.get("prompt_tokens")), _int(counts.get("completion_tokens"))
    cached = creation = reasoning = 0
    found = counts.get("prompt_tokens_details")
    if isinstance(found, dict):
        details: dict[str, Any] = found
        cached, creation = _int(details.get("cached_tokens")), _int(details.get("cache_creation_tokens"))
    found = counts.get("completion_tokens_details")
    if isinstance(found, dict):
        out_details: dict[str, Any] = found
        reasoning = _int(out_details.get("reasoning_tokens"))
    return prompt, completion, cached, creation, reasoning


def responses_usage(usage: Any) -> bytes:
    """The Responses API's usage object, as JSON, from a chat `usage` object: a bytes literal formatted
    where it is written (compiled: one allocation, where a dict and its dump cost several times that)."""
    prompt, completion, cached, _, reasoning = chat_counts(usage)
    return (b'{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,'
            b'"output_tokens_details":{"reasoning_tokens":%d},"total_tokens":%d}'
            % (prompt, cached, completion, reasoning, prompt + completion))


def anthropic_usage(usage: Any) -> bytes:
    """Anthropic's usage object, as JSON, from a chat `usage` object (`input_tokens` without the cache's)."""
    prompt, completion, cached, creation, _ = chat_counts(usage)
    return (b'{"input_tokens":%d,"output_tokens":%d,"cache_read_input_tokens":%d,"cache_creation_input_tokens":%d}'
            % (max(0, prompt - cached - creation), completion, cached, creation))


def chat_usage_from_anthropic(usage: Any) -> dict[str, Any]:
    """Anthropic's usage as chat usage: prompt tokens include the cache reads and writes."""
    usage = usage if isinstance(usage, dict) else {}
    fresh, output = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    read, written = _int(usage.get("cache_read_input_tokens")), _int(usage.get("cache_creation_input_tokens"))
    prompt = fresh + read + written
    return {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output,
            "prompt_tokens_details": {"cached_tokens": read, "cache_creation_tokens": written}}


def chat_usage_from_responses(usage: Any) -> dict[str, Any]:
    """The Responses API's usage as chat usage (what the gateway records and bills)."""
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("input_tokens_details")
    out_details = usage.get("output_tokens_details")
    prompt, completion = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    chat: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                            "total_tokens": prompt + completion,
                            "prompt_tokens_details": {"cached_tokens": _int(details.get("cached_tokens"))
                                                      if isinstance(details, dict) else 0}}
    if isinstance(out_details, dict):
        chat["completion_tokens_details"] = {"reasoning_tokens": _int(out_details.get("reasoning_tokens"))}
    return chat
