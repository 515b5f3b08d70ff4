"""The main job: real generation by the embedded local models through the gateway, openai SDK as client."""

from __future__ import annotations

import openai
import pytest

from sits.app import Gateway
from sits.configuration.embedded_default import embedded_default_config
from sits.settings import Settings
from tests.conftest import sdk

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
async def embedded(tmp_path_factory):
    data_dir = tmp_path_factory.getbasetemp().parent / "sits-data"  # shared across runs: gemma assembles once
    gateway = Gateway(Settings(host="127.0.0.1", port=0, data_dir=data_dir), embedded_default_config())
    await gateway.start()
    yield gateway
    await gateway.stop()


async def test_embedded_models_answer_auto_streaming_and_not(embedded):
    client = sdk(embedded, timeout=120)
    models = [m.id async for m in client.models.list()]
    assert {"smollm2-135m", "gemma3-270m", "auto"} <= set(models)

    raw = await client.chat.completions.with_raw_response.create(model="auto", messages=QUESTION, max_tokens=12,
                                                                temperature=0)
    answer = raw.parse()
    assert raw.headers["x-sits-model"] == "smollm2-135m"  # a short simple prompt goes to the tiny tier
    assert "auto=tier tiny" in raw.headers["x-sits-route"]
    assert answer.choices[0].message.content.strip()
    assert answer.usage.completion_tokens > 0

    stream = await client.chat.completions.create(model="smollm2-135m", messages=QUESTION, max_tokens=12,
                                                  stream=True, stream_options={"include_usage": True})
    deltas, usage = [], None
    async for chunk in stream:
        deltas += [c.delta.content for c in chunk.choices if c.delta.content]
        usage = chunk.usage or usage
    assert len(deltas) >= 2  # token by token, not one lump
    assert usage is not None and usage.completion_tokens >= len(deltas) - 1

    completion = await client.completions.create(model="gemma3-270m", prompt="The capital of France is",
                                                 max_tokens=8, temperature=0)
    assert completion.choices[0].text.strip()

    code = await client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Fix this code:\n```python\nprint(1+)\n```"}],
        max_tokens=8)
    assert code.headers["x-sits-model"] == "gemma3-270m"


async def test_embeddings_on_a_chat_model_is_a_clear_client_error(embedded):
    with pytest.raises(openai.BadRequestError) as info:
        await sdk(embedded).embeddings.create(model="smollm2-135m", input="hello")
    assert "embedding" in info.value.message.lower()
