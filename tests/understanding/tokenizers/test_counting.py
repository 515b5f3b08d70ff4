"""Exact counts: local tokenizers agree with what the engines' /tokenize endpoints return."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from sits.errors import UpstreamProtocolError, UpstreamStatusError
from sits.understanding.tokenizers.backend_tokenizer import BackendTokenizer, parse_tokenize_response

RECORDED = Path(__file__).parent / "recorded"
SENTENCE = "The quick brown fox jumps over the lazy dog."


class RecordedEngine:
    """Answers POST /tokenize with a response recorded from an engine; keeps the requests it got."""

    def __init__(self, recording: str, status: int = 200) -> None:
        self.body = (RECORDED / recording).read_bytes() if recording else b"{}"
        self.status = status
        self.requests: list[dict] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _tokenize(self, request: web.Request) -> web.Response:
        self.requests.append(await request.json())
        return web.Response(body=self.body, status=self.status, content_type="application/json")

    async def __aenter__(self) -> RecordedEngine:
        app = web.Application()
        app.router.add_post("/tokenize", self._tokenize)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.mark.parametrize(("engine", "recording"), [("vllm", "vllm_tokenize_qwen3.json"),
                                                    ("sglang", "sglang_tokenize_qwen3.json")])
async def test_vllm_and_sglang_counts_match_the_local_qwen_tokenizer(catalog, session, engine, recording):
    async with RecordedEngine(recording) as server:
        remote = BackendTokenizer(session, server.url + "/v1", engine, model="Qwen/Qwen3-8B")
        tokenized = await remote.tokenize(SENTENCE)
    assert list(tokenized.tokens) == catalog.counters["qwen3"].encode(SENTENCE)
    assert tokenized.max_model_len == 40960
    assert server.requests == [{"model": "Qwen/Qwen3-8B", "prompt": SENTENCE, "add_special_tokens": False}]


@pytest.mark.parametrize("recording", ["llamacpp_tokenize_smollm2.json", "llamacpp_tokenize_pieces_smollm2.json"])
async def test_llama_cpp_counts_match_the_local_gguf_tokenizer(smollm2_catalog, session, recording):
    pieces = "pieces" in recording
    async with RecordedEngine(recording) as server:
        tokenized = await BackendTokenizer(session, server.url, "llamacpp").tokenize(SENTENCE, with_pieces=pieces)
    local = smollm2_catalog.counters["smollm2"]
    assert list(tokenized.tokens) == local.encode(SENTENCE) and local.count(SENTENCE) == 10
    assert server.requests == [{"content": SENTENCE, "add_special": False, "with_pieces": pieces}]
    if pieces:
        assert "".join(tokenized.pieces or ()) == SENTENCE


async def test_an_engine_error_status_is_an_upstream_error(session):
    async with RecordedEngine("", status=404) as server:
        with pytest.raises(UpstreamStatusError) as info:
            await BackendTokenizer(session, server.url, "vllm", "m").count("x")
    assert info.value.upstream_status == 404


@pytest.mark.parametrize("body", [b"not json", b'{"count": 3}', b'{"tokens": ["a"]}',
                                  b'{"tokens": [1, 2], "count": 3}'])
def test_malformed_tokenize_answers_are_protocol_errors(body):
    with pytest.raises(UpstreamProtocolError):
        parse_tokenize_response(body)


def test_hf_counts_are_the_tokenizers_own(catalog):
    from tokenizers import Tokenizer

    from tests.conftest import TOKENIZERS

    for family in ("llama3", "qwen3", "deepseek_v3"):
        reference = Tokenizer.from_file(str(TOKENIZERS / family / "tokenizer.json"))
        text = "Ein kleiner Test — 测试 🙂 with code: def f(x): return x**2\n"
        assert catalog.counters[family].count(text) == len(reference.encode(text, add_special_tokens=False).ids)
