"""The semantic cache's key for one chat/completions or completions request.

- scope: the tenant when known (all of a tenant's keys share answers), else a SHA-256 of the
  client's API key, else "anonymous"; the key itself is never kept.
- model: the model name the client asked for (alias as sent).
- params: a digest of every generation parameter except the prompt (`messages`/`prompt`) and
  the ones that change delivery, not the answer (`stream`, `stream_options`, `user`). Unknown
  fields count too (`top_k` changes answers). Null equals absent; 1.0 equals 1.
- context: a digest of every message but the last, so a semantic match can only differ in the
  last user turn: system prompt and history must be identical.
- exact: a digest of the whole prompt; text: the last user turn, embedded for similarity.

Not cacheable at all (None): `n` > 1 and log-probabilities, which a stored single text cannot
replay, bodies that are not a chat/completions request, and a Responses request that continues a
conversation SITS does not hold (its chat body lacks the earlier turns). `deterministic` (temperature == 0)
tells the config whether an opted-in route may serve it; see `SemanticCacheConfig.allows`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from sits.pipeline.context import RoutingRequest
from sits.state.semantic_cache import CacheKey

# MiniLM reads 256 word pieces (~1000 characters of English) and drops the rest; two long
# prompts that agree on their first 1000 characters would look identical, so longer text
# gets exact matching only.
SEMANTIC_MAX_CHARS = 1000
_PROMPT_FIELDS = {"/chat/completions": "messages", "/completions": "prompt"}
_NOT_PARAMETERS = frozenset({"model", "messages", "prompt", "stream", "stream_options", "user"})


def cache_scope(tenant: str | None, api_key: str | None) -> str:
    if tenant:
        return f"tenant:{tenant}"
    if api_key:
        return "key:" + hashlib.sha256(api_key.encode("utf-8")).hexdigest()
    return "anonymous"


def build_cache_key(request: RoutingRequest, body: bytes, scope: str) -> CacheKey | None:
    """The key for `body` (the client's JSON as received), or None when it cannot be cached."""
    prompt_field = _PROMPT_FIELDS.get(request.api)
    if prompt_field is None or (request.passthrough is not None and request.passthrough.unknown_previous):
        return None
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or prompt_field not in payload:
        return None
    if payload.get("n") not in (None, 1) or payload.get("logprobs") or payload.get("top_logprobs"):
        return None
    prompt = payload[prompt_field]
    if prompt_field == "messages":
        if not isinstance(prompt, list) or not prompt:
            return None
        context, text = _digest(prompt[:-1]), _last_user_text(prompt[-1])
    else:
        context, text = _digest(None), prompt if isinstance(prompt, str) else None
    if text is not None and (not text.strip() or len(text) > SEMANTIC_MAX_CHARS):
        text = None
    params = {k: v for k, v in payload.items() if k not in _NOT_PARAMETERS and v is not None}
    temperature = payload.get("temperature")
    return CacheKey(
        scope=scope,
        model=request.model,
        api=request.api,
        params=_digest(params),
        context=context,
        exact=_digest(prompt),
        text=text,
        deterministic=isinstance(temperature, int | float) and temperature == 0,
    )


def _last_user_text(message: Any) -> str | None:
    """The last turn's text when it is a user turn of text only; images etc. defeat similarity."""
    if not isinstance(message, dict) or message.get("role") != "user":
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "\n".join(p["text"] for p in content)
    return None


def _digest(value: Any) -> str:
    canonical = orjson.dumps(_canonical(value), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()[:32]


def _canonical(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value
