"""Moving a request's token-level fields between families, and continuing a partial answer."""

from __future__ import annotations

import math

import pytest

from sits.errors import InvalidRequest
from sits.understanding.tokenizers.continuation import continuation_request
from sits.understanding.tokenizers.translation import (
    scale_max_tokens,
    token_ratio,
    translate_logit_bias,
    translate_request,
    translate_stop_ids,
)


def _one(counter, text):
    (token_id,) = counter.encode(text)
    return token_id


def test_logit_bias_moves_to_the_targets_ids_and_reports_what_it_dropped(catalog):
    llama, qwen = catalog.counters["llama3"], catalog.counters["qwen3"]
    unmappable = next(i for i in range(1000, 128000) if catalog.bridge.translate_id("llama3", "qwen3", i) is None)
    bias = {str(_one(llama, " yes")): 5.0, str(_one(llama, " no")): -100, str(unmappable): 3}
    out = translate_logit_bias(catalog.bridge, "llama3", "qwen3", bias)
    assert out.bias == {str(_one(qwen, " yes")): 5.0, str(_one(qwen, " no")): -100.0}
    assert out.dropped == (unmappable,)


@pytest.mark.parametrize("key", ["abc", "-3", "1.5", " 7"])
def test_a_logit_bias_key_that_is_no_token_id_is_a_client_error(catalog, key):
    with pytest.raises(InvalidRequest) as info:
        translate_logit_bias(catalog.bridge, "llama3", "qwen3", {key: 1})
    assert info.value.param == "logit_bias"


def test_end_of_turn_stops_become_the_targets_end_markers(catalog):
    llama, qwen = catalog.bridge.family("llama3"), catalog.bridge.family("qwen3")
    eot = next(i for i in llama.end_ids if llama.surfaces[i] == b"<|eot_id|>")
    out = translate_stop_ids(catalog.bridge, "llama3", "qwen3", [eot])
    assert set(out.token_ids) == set(qwen.end_ids) and b"<|im_end|>" in {qwen.surfaces[i] for i in out.token_ids}


def test_stops_without_a_counterpart_become_stop_strings(catalog):
    llama = catalog.counters["llama3"]
    unmappable = next(i for i in range(1000, 128000)
                      if catalog.bridge.translate_id("llama3", "deepseek_v3", i) is None
                      and catalog.bridge.family("llama3").text_of(i))
    newline = _one(llama, "\n\n")
    out = translate_stop_ids(catalog.bridge, "llama3", "deepseek_v3", [newline, unmappable])
    assert out.token_ids == (catalog.bridge.translate_id("llama3", "deepseek_v3", newline),)
    assert out.strings == (catalog.bridge.family("llama3").text_of(unmappable),)


def test_token_budgets_scale_by_the_families_token_ratio(catalog):
    text = "第一次世界大战 (1914–1918) was a global conflict. 你好世界，今天天气很好。" * 3
    llama, qwen = catalog.counters["llama3"], catalog.counters["qwen3"]
    ratio = token_ratio(llama, qwen, text)
    assert ratio == pytest.approx(qwen.count(text) / llama.count(text))
    assert ratio != 1.0  # Qwen splits digits one by one, Llama-3 in threes: the families disagree
    assert scale_max_tokens(100, ratio) == math.ceil(100 * ratio)
    assert token_ratio(None, qwen, text) == 1.0 and token_ratio(llama, qwen, "") == 1.0
    assert scale_max_tokens(1, 0.01) == 1


def test_a_whole_request_is_translated_and_other_fields_pass_through(catalog):
    llama = catalog.counters["llama3"]
    body = {"model": "a", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.3,
            "max_tokens": 64, "logit_bias": {str(_one(llama, " yes")): 2}, "stop": ["END"],
            "stop_token_ids": [128009, _one(llama, " Paris")]}
    out = translate_request(catalog.bridge, "llama3", "qwen3", body, catalog.counters, sample="Hello there")
    qwen = catalog.counters["qwen3"]
    assert out.body["temperature"] == 0.3 and out.body["messages"] == body["messages"]
    assert out.body["logit_bias"] == {str(_one(qwen, " yes")): 2.0}
    assert _one(qwen, " Paris") in out.body["stop_token_ids"] and 151645 in out.body["stop_token_ids"]
    assert out.body["max_tokens"] == scale_max_tokens(64, out.token_ratio)
    assert body["max_tokens"] == 64  # the caller's dict is not changed


def test_bad_stop_token_ids_name_the_field(catalog):
    with pytest.raises(InvalidRequest) as info:
        translate_request(catalog.bridge, "llama3", "qwen3", {"stop_token_ids": "7"}, catalog.counters)
    assert info.value.param == "stop_token_ids"


def test_a_partial_answer_continues_as_an_assistant_prefix_in_the_targets_tokens(catalog):
    qwen = catalog.counters["qwen3"]
    body = {"model": "llama", "messages": [{"role": "user", "content": "Name three rivers."}], "max_tokens": 50,
            "stream": True}
    partial = "1. The Nile\n2. The Ama"
    out = continuation_request(body, partial, "qwen", qwen)
    assert out.body["messages"][-1] == {"role": "assistant", "content": partial}
    assert out.body["continue_final_message"] is True and out.body["add_generation_prompt"] is False
    assert out.body["model"] == "qwen" and out.body["stream"] is True
    assert list(out.prefix_token_ids) == qwen.encode(partial)
    assert qwen.decode(list(out.prefix_token_ids)) == partial
    assert out.remaining_tokens == 50 - len(out.prefix_token_ids) == out.body["max_tokens"]
    assert body["messages"][-1]["role"] == "user"


def test_a_client_assistant_prefix_is_extended_not_duplicated(catalog):
    qwen = catalog.counters["qwen3"]
    body = {"messages": [{"role": "user", "content": "Go"}, {"role": "assistant", "content": "Sure: "}]}
    out = continuation_request(body, "one, two", "qwen", qwen)
    assert out.body["messages"] == [{"role": "user", "content": "Go"}, {"role": "assistant", "content": "Sure: one, two"}]
    assert out.remaining_tokens is None


def test_continuation_needs_chat_messages(catalog):
    with pytest.raises(InvalidRequest) as info:
        continuation_request({"prompt": "x"}, "y", "qwen", catalog.counters["qwen3"])
    assert info.value.param == "messages"
