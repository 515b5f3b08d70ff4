"""A workflow result as an OpenAI chat completion: JSON body, SSE events, and x-sits-* headers."""

from __future__ import annotations

from typing import Any

import orjson

from sits.pipeline.fusion.result import WorkflowResult

_PIECE_CHARS = 64  # content per streamed event: the answer is complete, so pieces are only for the client's UI


def render_json(result: WorkflowResult, request_id: str) -> bytes:
    return orjson.dumps({
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion",
        "created": result.created,
        "model": result.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result.content}, "logprobs": None,
                     "finish_reason": result.finish_reason}],
        "usage": _usage(result),
        "sits": result.extension(),
    })


def render_sse(result: WorkflowResult, request_id: str, include_usage: bool = False) -> list[bytes]:
    """Role, content in pieces, then the finish event carrying the `sits` extension, [usage], [DONE]."""
    text = result.content
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": text[i:i + _PIECE_CHARS]} for i in range(0, len(text), _PIECE_CHARS)]
    events = [_event(_chunk(result, request_id, [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]))
              for d in deltas]
    last = _chunk(result, request_id, [{"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": result.finish_reason}])
    last["sits"] = result.extension()
    events.append(_event(last))
    if include_usage:
        usage = _chunk(result, request_id, [])
        usage["usage"] = _usage(result)
        events.append(_event(usage))
    events.append(b"data: [DONE]\n\n")
    return events


def headers(result: WorkflowResult) -> list[tuple[bytes, bytes]]:
    out = [
        (b"x-sits-model", result.model.encode("latin-1", "replace")),
        (b"x-sits-workflow", result.workflow.encode("latin-1", "replace")),
        (b"x-sits-confidence", f"{result.confidence:.4f}".encode()),
        (b"x-sits-route", result.route().encode("latin-1", "replace")),
    ]
    if result.verifier_summary:
        out.append((b"x-sits-verifier", result.verifier_summary.encode()))
    if result.intent:
        out.append((b"x-sits-intent", result.intent.encode("latin-1", "replace")))
    return out


def _chunk(result: WorkflowResult, request_id: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": f"chatcmpl-{request_id}", "object": "chat.completion.chunk", "created": result.created,
            "model": result.model, "choices": choices}


def _usage(result: WorkflowResult) -> dict[str, int]:
    """Every step's tokens together: what the workflow cost, not just the chosen draft."""
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens}


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"
