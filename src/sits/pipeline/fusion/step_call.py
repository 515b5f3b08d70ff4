"""One model call of a workflow step, made through the director like any client request:
scheduling, admission, fallback chain, cache steps and stats all apply to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from sits.errors import UpstreamProtocolError
from sits.pipeline.cached_response import completion_from_json
from sits.pipeline.canned_answer import CannedAnswer
from sits.pipeline.answer import Answer
from sits.pipeline.context import RoutingRequest
from sits.pipeline.exchange import Exchange
from sits.state.routing_table import RoutingTable
from sits.state.semantic_cache import CachedCompletion

CHAT = "/chat/completions"
ESTIMATE_OUTPUT_TOKENS = 1024  # worst case for the cost budget when neither step nor client sets max_tokens


class StepDirector(Protocol):
    """What the runner needs of the director (it is the director; a Protocol avoids an import cycle)."""

    async def run(self, request: RoutingRequest, body: bytes) -> Any: ...

    def remember(self, answer: Answer, completion: CachedCompletion | None) -> None: ...


@dataclass(frozen=True, slots=True)
class CallAnswer:
    model: str
    endpoint: str
    content: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


async def call_model(director: StepDirector, parent: RoutingRequest, request_id: str, model: str,
                     messages: list[dict[str, Any]], params: dict[str, Any]) -> CallAnswer:
    """A non-streaming chat call for `model`; raises the director's SitsErrors unchanged."""
    body = orjson.dumps({"model": model, "messages": messages, **params, "stream": False})
    prompt = "\n".join(m["content"] for m in messages if isinstance(m.get("content"), str))
    request = RoutingRequest(api=CHAT, model=model, stream=False, request_id=request_id, prompt_text=prompt,
                             priority=parent.priority, tenant=parent.tenant, cache_scope=parent.cache_scope,
                             trace=parent.trace)
    answer = await director.run(request, body)
    if isinstance(answer, CannedAnswer):
        c = answer.hit.completion
        source = "static-template" if answer.hit.match == "static" else "semantic-cache"
        return CallAnswer(answer.model, source, c.content, c.finish_reason, 0, 0)
    if not isinstance(answer, Exchange):
        raise UpstreamProtocolError(f"workflow step for '{model}' did not resolve to a model")
    try:
        payload = await answer.read()
    except BaseException:
        answer.close()
        raise
    if answer.cache_key is not None:
        director.remember(answer, completion_from_json(CHAT, payload))
    return _parse(answer, payload)


def _parse(exchange: Exchange, payload: bytes) -> CallAnswer:
    try:
        data = orjson.loads(payload)
        choice = data["choices"][0]
        content = choice["message"].get("content") or ""
        usage = data.get("usage") or {}
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
        raise UpstreamProtocolError(f"upstream {exchange.endpoint.id} sent a chat completion without a message: "
                                    f"{payload[:200]!r}") from None
    return CallAnswer(exchange.model, exchange.endpoint.id, str(content), str(choice.get("finish_reason") or "stop"),
                      int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))


def estimate_cost(table: RoutingTable, model: str, prompt_chars: int, max_tokens: int | None) -> float:
    """Worst-case dollars for one call, from the model's configured prices (0 when it has none)."""
    entry = table.resolve(model)
    if entry is None:
        return 0.0
    output = max_tokens or ESTIMATE_OUTPUT_TOKENS
    return (prompt_chars / 4) / 1000 * (entry.cost_per_1k_input or 0.0) + output / 1000 * (entry.cost_per_1k_output or 0.0)


def actual_cost(table: RoutingTable, model: str, prompt_tokens: int, completion_tokens: int) -> float:
    entry = table.resolve(model)
    if entry is None:
        return 0.0
    return prompt_tokens / 1000 * (entry.cost_per_1k_input or 0.0) + \
        completion_tokens / 1000 * (entry.cost_per_1k_output or 0.0)
