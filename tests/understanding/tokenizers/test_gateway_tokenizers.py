"""A real gateway finds tokenizers under <data dir>/tokenizers/, caches their maps, and counts exactly."""

from __future__ import annotations

import aiohttp

from tests.conftest import base_url, one_model_config
from tests.understanding.tokenizers.conftest import TOKENIZERS

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
