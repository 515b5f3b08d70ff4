"""Cache keys: what separates answers (scope, model, parameters, context) and what does not."""

from __future__ import annotations

import orjson
import pytest

from sits.pipeline.cache_keys import SEMANTIC_MAX_CHARS, build_cache_key, cache_scope
from sits.pipeline.context import RoutingRequest

CHAT = "/chat/completions"
BASE = {"model": "m1", "temperature": 0, "max_tokens": 50,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]}


def key(body: dict, api: str = CHAT, model: str = "m1", scope: str = "tenant:a"):
    request = RoutingRequest(api=api, model=model, stream=bool(body.get("stream")), request_id="r1")
    return build_cache_key(request, orjson.dumps(body), scope)


def with_(**changes) -> dict:
    return {**BASE, **changes}


def test_scope_prefers_tenant_and_never_keeps_the_api_key():
    assert cache_scope("acme", "sk-secret") == "tenant:acme"
    scope = cache_scope(None, "sk-secret")
    assert scope.startswith("key:") and "sk-secret" not in scope
    assert scope != cache_scope(None, "sk-other")
    assert cache_scope(None, None) == "anonymous"


@pytest.mark.parametrize("same", [
    with_(stream=True),
    with_(stream=True, stream_options={"include_usage": True}),
    with_(user="someone-else"),
    with_(temperature=0.0, max_tokens=50.0),  # 0.0 == 0
    with_(top_p=None),                         # null == absent
    {k: BASE[k] for k in reversed(list(BASE))},  # key order
])
def test_delivery_fields_do_not_change_the_key(same):
    assert key(same) == key(BASE)


@pytest.mark.parametrize("other", [
    with_(temperature=0.5),
    with_(max_tokens=51),
    with_(seed=1),
    with_(stop=["\n"]),
    with_(top_k=5),                       # unknown to SITS, still a generation parameter
    with_(response_format={"type": "json_object"}),
    with_(tools=[{"type": "function", "function": {"name": "f"}}]),
])
def test_generation_parameters_change_the_fingerprint(other):
    a, b = key(BASE), key(other)
    assert a.params != b.params and a.partition != b.partition
    assert (a.exact, a.text, a.context) == (b.exact, b.text, b.context)


def test_model_and_scope_change_the_partition():
    assert key(BASE, model="m2").partition != key(BASE).partition
    assert key(BASE, scope="tenant:b").partition != key(BASE).partition


def test_context_is_everything_but_the_last_turn():
    other_system = with_(messages=[{"role": "system", "content": "Be verbose."}, BASE["messages"][1]])
    a, b = key(BASE), key(other_system)
    assert a.text == b.text == "Capital of France?"
    assert a.context != b.context and a.exact != b.exact and a.partition != b.partition
    rephrased = with_(messages=[BASE["messages"][0], {"role": "user", "content": "France's capital?"}])
    c = key(rephrased)
    assert c.partition == a.partition and c.exact != a.exact  # same partition: a semantic match may answer


@pytest.mark.parametrize(("body", "deterministic"), [
    (with_(temperature=0), True),
    (with_(temperature=0.0), True),
    (with_(temperature=0.7), False),
    ({k: v for k, v in BASE.items() if k != "temperature"}, False),  # OpenAI's default is 1
])
def test_deterministic_only_at_temperature_zero(body, deterministic):
    assert key(body).deterministic is deterministic


@pytest.mark.parametrize("body", [
    with_(n=2),
    with_(logprobs=True),
    with_(top_logprobs=3),
    with_(messages=[]),
])
def test_not_cacheable(body):
    assert key(body) is None


def test_not_cacheable_outside_chat_and_completions():
    assert key({"model": "m1", "input": "hi"}, api="/embeddings") is None
    request = RoutingRequest(api=CHAT, model="m1", stream=False, request_id="r")
    assert build_cache_key(request, b"{not json", "anonymous") is None
    assert build_cache_key(request, b"[1, 2]", "anonymous") is None


@pytest.mark.parametrize(("last", "text"), [
    ({"role": "user", "content": "hello"}, "hello"),
    ({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, "a\nb"),
    ({"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                  {"type": "image_url", "image_url": {"url": "data:..."}}]}, None),
    ({"role": "assistant", "content": "hello"}, None),
    ({"role": "user", "content": "   "}, None),
    ({"role": "user", "content": "x" * (SEMANTIC_MAX_CHARS + 1)}, None),
])
def test_semantic_text_is_the_last_user_turn_of_text_only(last, text):
    k = key(with_(messages=[last]))
    assert k is not None and k.text == text


def test_completions_prompt():
    body = {"model": "m1", "prompt": "Once upon a time", "temperature": 0}
    k = key(body, api="/completions")
    assert k.text == "Once upon a time" and k.api == "/completions"
    assert key({**body, "prompt": [1, 2, 3]}, api="/completions").text is None  # token ids: exact only
    assert key(body, api="/completions").partition != key(BASE).partition
