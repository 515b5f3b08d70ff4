"""A real gateway finds tokenizers under <data dir>/tokenizers/, caches their maps, and counts exactly."""

from __future__ import annotations

import aiohttp

from tests.conftest import base_url, one_model_config, sdk
from tests.conftest import TOKENIZERS

ADMIN = {"authorization": "Bearer admin-key"}


async def call(gateway, method, path, body=None, headers=ADMIN):
    async with aiohttp.ClientSession() as http, \
            http.request(method, base_url(gateway) + path, json=body, headers=headers) as response:
        return response.status, await response.json()


async def test_tokenizers_load_at_startup_and_count_for_their_models(start_gateway, upstream, tmp_path, catalog):
    data_dir = tmp_path / "data"
    (data_dir / "tokenizers").mkdir(parents=True)
    for family in ("llama3", "qwen3"):
        (data_dir / "tokenizers" / family).symlink_to(TOKENIZERS / family)
    config = {**one_model_config(f"http://127.0.0.1:{upstream.port}/v1", name="chat"),
              "control": {"allow_loopback": True}}
    gateway = await start_gateway(config, secrets={"SITS_ADMIN_KEY": "admin-key"}, data_dir=data_dir)
    await gateway.tokenizers_ready()

    status, body = await call(gateway, "GET", "/v1/tokenizers")
    assert status == 200
    assert {f["family"]: f["tokens"] for f in body["families"]} == {"llama3": 128256, "qwen3": 151669}
    assert all(f["exact_counts"] for f in body["families"])
    shares = {(c["source"], c["target"]): c["share"] for c in body["coverage"]}
    assert shares["llama3", "qwen3"] > 0.8
    cached = sorted(p.name.split("-")[0] for p in (data_dir / "tokenizers" / "cache").glob("*.npz"))
    assert cached == ["llama3", "qwen3"]

    text = "Wie viele Tokens hat dieser Satz? 这个句子有多少个词元？"
    status, body = await call(gateway, "POST", "/v1/tokenizers/count", {"model": "chat", "text": text})
    assert status == 422 and body["error"]["param"] == "model"  # no tokenizer named for "chat"
    status, _ = await call(gateway, "POST", "/v1/models/register", {
        "name": "qwen-chat", "endpoint": f"http://127.0.0.1:{upstream.port}/v1", "tokenizer_family": "qwen3"})
    assert status == 201
    status, body = await call(gateway, "POST", "/v1/tokenizers/count", {"model": "qwen-chat", "text": text})
    assert status == 200 and body == {"model": "qwen-chat", "family": "qwen3",
                                      "tokens": catalog.counters["qwen3"].count(text)}
    status, body = await call(gateway, "POST", "/v1/tokenizers/count", {"model": "nope", "text": "x"})
    assert status == 404 and body["error"]["param"] == "model"
    status, body = await call(gateway, "POST", "/v1/tokenizers/count", {"model": "chat"})
    assert status == 422 and body["error"]["param"] == "text"
    assert (await call(gateway, "GET", "/v1/tokenizers", headers={}))[0] == 401


async def test_a_gateway_without_a_tokenizer_directory_has_none(start_gateway, upstream):
    gateway = await start_gateway(one_model_config(f"http://127.0.0.1:{upstream.port}/v1"),
                                  secrets={"SITS_ADMIN_KEY": "admin-key"})
    await gateway.tokenizers_ready()
    status, body = await call(gateway, "GET", "/v1/tokenizers")
    assert status == 200 and body == {"families": [], "coverage": []}


async def test_a_fallback_to_another_family_gets_the_request_in_its_own_tokens(start_gateway, upstream, upstream_b,
                                                                              tmp_path, catalog):
    data_dir = tmp_path / "data"
    (data_dir / "tokenizers").mkdir(parents=True)
    for family in ("llama3", "qwen3"):
        (data_dir / "tokenizers" / family).symlink_to(TOKENIZERS / family)
    config = {**one_model_config(f"http://127.0.0.1:{upstream.port}/v1", name="static"),
              "control": {"allow_loopback": True}}
    gateway = await start_gateway(config, secrets={"SITS_ADMIN_KEY": "admin-key"}, data_dir=data_dir)
    await gateway.tokenizers_ready()
    for name, port, family, fallbacks in (("qwen-chat", upstream_b.port, "qwen3", []),
                                          ("llama-chat", upstream.port, "llama3", ["qwen-chat"])):
        status, body = await call(gateway, "POST", "/v1/models/register", {
            "name": name, "endpoint": f"http://127.0.0.1:{port}/v1", "tokenizer_family": family,
            "fallbacks": fallbacks})
        assert status == 201, body
    upstream.mode = "error500"  # the Llama-3 model fails: the request falls back to the Qwen3 one
    llama, qwen = catalog.counters["llama3"], catalog.counters["qwen3"]
    (yes_llama,), (yes_qwen,) = llama.encode(" yes"), qwen.encode(" yes")
    prompt = "Answer yes or no: is 1234 + 5678 = 6912? 请回答。"
    async with sdk(gateway) as client:
        answer = await client.chat.completions.create(
            model="llama-chat", messages=[{"role": "user", "content": prompt}], max_tokens=40,
            logit_bias={str(yes_llama): 5}, extra_body={"stop_token_ids": [128009]})
    assert answer.choices[0].message.content
    sent = upstream_b.log.requests[-1]
    assert sent["model"] == "qwen-chat" and sent["logit_bias"] == {str(yes_qwen): 5.0}
    assert 151645 in sent["stop_token_ids"]  # <|eot_id|> became <|im_end|> (and <|endoftext|>)
    ratio = qwen.count(prompt) / llama.count(prompt)
    assert sent["max_tokens"] == -(-40 * qwen.count(prompt) // llama.count(prompt)) and ratio != 1.0
    assert upstream.log.requests[-1]["logit_bias"] == {str(yes_llama): 5}  # the first attempt went as sent


async def test_the_exact_count_decides_the_context_window(start_gateway, upstream, upstream_b, tmp_path, catalog):
    data_dir = tmp_path / "data"
    (data_dir / "tokenizers").mkdir(parents=True)
    (data_dir / "tokenizers" / "qwen3").symlink_to(TOKENIZERS / "qwen3")  # the family of the model named qwen3
    config = {"server": {"drain_timeout_s": 2}, "models": [
        {"name": "qwen3", "context_window": 60, "endpoints": [{"url": f"http://127.0.0.1:{upstream.port}/v1"}]},
        {"name": "big", "context_window": 100_000, "endpoints": [{"url": f"http://127.0.0.1:{upstream_b.port}/v1"}]},
    ]}
    gateway = await start_gateway(config, data_dir=data_dir)
    await gateway.tokenizers_ready()
    dense = "上下文窗口的精确计数" * 22  # 220 characters: len/4 says 55 tokens (fits 60), Qwen3 counts far more
    sparse = "the quick brown fox " * 11  # 220 characters: len/4 says 55 as well, and Qwen3 agrees it fits
    qwen = catalog.counters["qwen3"]
    assert qwen.count(dense) > 60 >= qwen.count(sparse) and len(dense) // 4 == len(sparse) // 4 == 55
    async with sdk(gateway) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="qwen3", messages=[{"role": "user", "content": dense}])
        assert raw.headers["x-sits-model"] == "big"  # moved to the larger window without a failed attempt
        assert upstream.log.requests == [] and len(upstream_b.log.requests) == 1
        raw = await client.chat.completions.with_raw_response.create(
            model="qwen3", messages=[{"role": "user", "content": sparse}])
        assert raw.headers["x-sits-model"] == "qwen3" and len(upstream.log.requests) == 1
