"""A serving engine's own tokenizer, through its `/tokenize` endpoint.

Exact by definition (the engine counts what it will run), but a network call: for counting
off the hot path, for models whose tokenizer files SITS does not have, and for checking a
local tokenizer against the engine. Request and response shapes, per engine:

- vLLM:      POST /tokenize {"model", "prompt", "add_special_tokens"}
             -> {"count", "max_model_len", "tokens", "token_strs"}
- SGLang:    POST /tokenize {"model", "prompt", "add_special_tokens"}
             -> {"tokens", "count", "max_model_len"}
- llama.cpp: POST /tokenize {"content", "add_special", "with_pieces"}
             -> {"tokens": [id, ...]} or, with pieces, {"tokens": [{"id", "piece"}, ...]}
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

import aiohttp
import orjson

from sits.errors import UpstreamConnectError, UpstreamProtocolError, UpstreamStatusError, UpstreamTimeout

EngineKind = Literal["vllm", "sglang", "llamacpp"]


@dataclass(frozen=True, slots=True)
class Tokenized:
    tokens: tuple[int, ...]
    max_model_len: int | None = None  # vLLM and SGLang report the served context window
    pieces: tuple[str, ...] | None = None  # llama.cpp with_pieces


class BackendTokenizer:
    """`/tokenize` of one engine. `base_url` is the server root (no `/v1`)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, engine: EngineKind, model: str = "",
                 timeout_s: float = 5.0) -> None:
        self._session = session
        self._url = base_url.rstrip("/").removesuffix("/v1") + "/tokenize"
        self._engine = engine
        self._model = model
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    def request_body(self, text: str, with_pieces: bool = False) -> dict[str, object]:
        if self._engine == "llamacpp":
            return {"content": text, "add_special": False, "with_pieces": with_pieces}
        return {"model": self._model, "prompt": text, "add_special_tokens": False}

    async def tokenize(self, text: str, with_pieces: bool = False) -> Tokenized:
        try:
            async with self._session.post(self._url, data=orjson.dumps(self.request_body(text, with_pieces)),
                                          headers={"content-type": "application/json"},
                                          timeout=self._timeout) as response:
                body = await response.read()
                status = response.status
        except asyncio.TimeoutError:
            raise UpstreamTimeout(f"{self._url}: no answer within {self._timeout.total}s") from None
        except aiohttp.ClientError as exc:
            raise UpstreamConnectError(f"{self._url}: {exc}") from None
        if status != 200:
            raise UpstreamStatusError(f"{self._url} answered {status}", upstream_status=status, body=body[:2048])
        return parse_tokenize_response(body, self._url)

    async def count(self, text: str) -> int:
        return len((await self.tokenize(text)).tokens)


def parse_tokenize_response(body: bytes, where: str = "/tokenize") -> Tokenized:
    """Any of the three engines' answers (see the module docstring)."""
    try:
        data = orjson.loads(body)
        raw = data["tokens"]
        pieces = None
        if raw and isinstance(raw[0], dict):  # llama.cpp with_pieces
            tokens = tuple(int(t["id"]) for t in raw)
            pieces = tuple(t["piece"] if isinstance(t["piece"], str) else bytes(t["piece"]).decode("utf-8", "replace")
                           for t in raw)
        else:
            tokens = tuple(int(t) for t in raw)
        max_len = data.get("max_model_len")
        count = data.get("count")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise UpstreamProtocolError(f"{where}: not a /tokenize answer ({exc})") from None
    if count is not None and count != len(tokens):
        raise UpstreamProtocolError(f"{where}: count {count} disagrees with {len(tokens)} tokens")
    return Tokenized(tokens, int(max_len) if isinstance(max_len, int) else None, pieces)
