"""Translate the token-level parts of a request when it moves to a model of another family.

Three fields name tokens or count them: `logit_bias` (token id -> bias), `stop_token_ids`
(vLLM/SGLang's extension) and `max_tokens` / `max_completion_tokens`. Ids move through the
bridge; an id without an exact counterpart is never guessed: a stop id becomes a stop
*string* (its text), a bias is dropped and reported. Token budgets scale by how many tokens
each family needs for the same text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sits.errors import InvalidRequest
from sits.understanding.tokenizers.bridge import TokenBridge
from sits.understanding.tokenizers.counter import TokenCounter


@dataclass(frozen=True, slots=True)
class LogitBiasTranslation:
    bias: dict[str, float]
    dropped: tuple[int, ...]  # source ids without an exact counterpart


@dataclass(frozen=True, slots=True)
class StopTranslation:
    token_ids: tuple[int, ...]
    strings: tuple[str, ...]  # stops that had no token counterpart but have text
    dropped: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RequestTranslation:
    body: dict[str, Any]
    dropped_bias: tuple[int, ...]
    dropped_stops: tuple[int, ...]
    token_ratio: float  # target tokens per source token on the sample text


def translate_logit_bias(bridge: TokenBridge, source: str, target: str,
                         logit_bias: Mapping[str, float]) -> LogitBiasTranslation:
    out: dict[str, float] = {}
    dropped = []
    for key, value in logit_bias.items():
        token_id = _token_id(key, "logit_bias")
        mapped = bridge.translate_id(source, target, token_id)
        if mapped is None:
            dropped.append(token_id)
            continue
        previous = out.get(str(mapped))
        if previous is None or abs(value) > abs(previous):  # two ids on one unit: the stronger bias wins
            out[str(mapped)] = float(value)
    return LogitBiasTranslation(out, tuple(dropped))


def translate_stop_ids(bridge: TokenBridge, source: str, target: str, ids: list[int]) -> StopTranslation:
    src, dst = bridge.family(source), bridge.family(target)
    assert src is not None and dst is not None
    mapped: list[int] = []
    strings: list[str] = []
    dropped: list[int] = []
    for token_id in ids:
        if token_id in src.end_ids:  # "end of turn" means the target's own end markers, whatever they are
            mapped.extend(sorted(dst.end_ids - set(mapped)))
            continue
        counterpart = bridge.translate_id(source, target, token_id)
        text = src.text_of(token_id)
        if counterpart is not None:
            if counterpart not in mapped:
                mapped.append(counterpart)
        elif text is not None:
            strings.append(text)
        else:
            dropped.append(token_id)
    return StopTranslation(tuple(mapped), tuple(strings), tuple(dropped))


def token_ratio(source: TokenCounter | None, target: TokenCounter | None, sample: str) -> float:
    """Target tokens per source token for `sample` (1.0 when either side cannot count)."""
    if source is None or target is None or not sample:
        return 1.0
    a, b = source.count(sample), target.count(sample)
    return b / a if a and b else 1.0


def scale_max_tokens(max_tokens: int, ratio: float) -> int:
    return max(1, math.ceil(max_tokens * ratio))


def translate_request(bridge: TokenBridge, source: str, target: str, body: Mapping[str, Any],
                      counters: Mapping[str, TokenCounter], sample: str = "") -> RequestTranslation:
    """`body` (an OpenAI request) with its token-level fields moved from `source` to `target`.

    `sample` (the prompt, or a partial answer) sets the token ratio for the budgets.
    """
    out = dict(body)
    ratio = token_ratio(counters.get(source), counters.get(target), sample)
    dropped_bias: tuple[int, ...] = ()
    dropped_stops: tuple[int, ...] = ()
    if isinstance(body.get("logit_bias"), Mapping):
        bias = translate_logit_bias(bridge, source, target, body["logit_bias"])
        out["logit_bias"] = bias.bias
        dropped_bias = bias.dropped
    if body.get("stop_token_ids") is not None:
        ids = body["stop_token_ids"]
        if not isinstance(ids, list):
            raise InvalidRequest("'stop_token_ids' must be a list of token ids", param="stop_token_ids")
        stops = translate_stop_ids(bridge, source, target, [_token_id(i, "stop_token_ids") for i in ids])
        out["stop_token_ids"] = list(stops.token_ids)
        if stops.strings:
            out["stop"] = _merged_stops(body.get("stop"), stops.strings)
        dropped_stops = stops.dropped
    for field in ("max_tokens", "max_completion_tokens"):
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out[field] = scale_max_tokens(value, ratio)
    return RequestTranslation(out, dropped_bias, dropped_stops, ratio)


def _token_id(value: object, field: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise InvalidRequest(f"'{field}' must name token ids (non-negative integers), got {value!r}", param=field)


def _merged_stops(existing: object, extra: tuple[str, ...]) -> list[str]:
    stops = [existing] if isinstance(existing, str) else list(existing) if isinstance(existing, list) else []
    for text in extra:
        if text not in stops:
            stops.append(text)
    return stops  # engines that take stop_token_ids (vLLM, SGLang) take any number of stop strings
