"""Continue a partial answer on a model of another family after a mid-stream failure.

The text already streamed to the client is re-tokenised by the *target* family and sent as
an assistant prefix: a chat request ending in the partial assistant message with
`continue_final_message: true` and `add_generation_prompt: false` (vLLM's and SGLang's
chat extensions), plus the prefix as target token ids for engines that take a token prompt.
The completion budget shrinks by what was already generated, counted in target tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sits.errors import InvalidRequest
from sits.understanding.tokenizers.counter import TokenCounter


@dataclass(frozen=True, slots=True)
class Continuation:
    body: dict[str, Any]  # the chat request for the target model
    prefix_token_ids: tuple[int, ...]  # the partial answer in the target's tokens
    generated_tokens: int  # the partial answer's length in target tokens
    remaining_tokens: int | None  # completion budget left (None: the client set none)


def continuation_request(body: Mapping[str, Any], partial_answer: str, target_model: str,
                         target: TokenCounter) -> Continuation:
    """The request that makes `target_model` go on from `partial_answer` instead of starting over."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("continuation needs a chat request with 'messages'", param="messages")
    prefix = tuple(target.encode(partial_answer)) if partial_answer else ()
    out = {k: v for k, v in body.items() if k not in ("n",)}  # one continuation of one answer
    last = messages[-1]
    if isinstance(last, dict) and last.get("role") == "assistant" and isinstance(last.get("content"), str):
        # the client itself sent an assistant prefix: the partial answer extends it
        continued = {**last, "content": last["content"] + partial_answer}
        out["messages"] = [*messages[:-1], continued]
    else:
        out["messages"] = [*messages, {"role": "assistant", "content": partial_answer}]
    out["model"] = target_model
    out["continue_final_message"] = True
    out["add_generation_prompt"] = False
    remaining = None
    for field in ("max_completion_tokens", "max_tokens"):
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            remaining = max(1, value - len(prefix))
            out[field] = remaining
    return Continuation(out, prefix, len(prefix), remaining)
