"""A real SmolLM2 worker, started by LocalWorkerPool, spoken to with the official SDK."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import openai
import pytest

from tests.backends.local.conftest import SMOLLM2

pytestmark = pytest.mark.asyncio(loop_scope="module")

HELLO = [{"role": "user", "content": "Say hello in three words."}]


async def test_chat_completion_has_the_openai_shape(client: openai.AsyncOpenAI) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model=SMOLLM2.name, messages=HELLO, max_tokens=8, temperature=0, seed=1
    )
    assert raw.headers["x-sits-engine"] == "llama.cpp"
    reply = raw.parse()
    assert reply.object == "chat.completion"
    assert reply.id.startswith("chatcmpl-")
    assert reply.model == SMOLLM2.name
    choice = reply.choices[0]
    assert choice.index == 0 and choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason in {"stop", "length"}
    assert reply.usage is not None and reply.usage.prompt_tokens > 5
    assert 0 < reply.usage.completion_tokens <= 8
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


async def test_same_seed_same_answer(client: openai.AsyncOpenAI) -> None:
    async def ask() -> str | None:
        reply = await client.chat.completions.create(
            model=SMOLLM2.name, messages=HELLO, max_completion_tokens=8, temperature=0.9, seed=42
        )
        return reply.choices[0].message.content

    assert await ask() == await ask()


async def test_streamed_chat_sends_deltas_then_usage(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model=SMOLLM2.name,
        messages=HELLO,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    contents = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(contents) >= 3
    assert chunks[0].choices[0].delta.role == "assistant"
    finishing = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishing in (["stop"], ["length"])
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.prompt_tokens > 5 and 0 < last.usage.completion_tokens <= 12
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1 and chunks[0].object == "chat.completion.chunk"


async def test_stream_ends_with_done_on_the_wire(smollm2_url: str) -> None:
    body = {"model": SMOLLM2.name, "messages": HELLO, "max_tokens": 4, "stream": True}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{smollm2_url}/chat/completions", json=body) as response:
            assert response.status == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["x-sits-engine"] == "llama.cpp"
            events = (await response.text()).split("\n\n")
    assert events[-1] == ""
    assert events[-2] == "data: [DONE]"
    assert all(e.startswith("data: {") for e in events[:-2])


async def test_text_completion_plain_and_streamed(client: openai.AsyncOpenAI) -> None:
    reply = await client.completions.create(
        model=SMOLLM2.name, prompt="The capital of France is", max_tokens=6, temperature=0
    )
    assert reply.object == "text_completion" and reply.id.startswith("cmpl-")
    assert reply.choices[0].text and reply.choices[0].finish_reason in {"stop", "length"}
    assert reply.usage is not None and reply.usage.completion_tokens > 0

    stream = await client.completions.create(
        model=SMOLLM2.name, prompt="The capital of France is", max_tokens=6, temperature=0, stream=True
    )
    pieces = [chunk.choices[0].text async for chunk in stream if chunk.choices]
    assert "".join(pieces) == reply.choices[0].text


async def test_stop_sequence_ends_the_answer(client: openai.AsyncOpenAI) -> None:
    reply = await client.completions.create(
        model=SMOLLM2.name, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0, stop=[" 6"]
    )
    assert " 6" not in reply.choices[0].text
    assert reply.choices[0].finish_reason == "stop"


async def test_models_lists_the_served_model(client: openai.AsyncOpenAI) -> None:
    models = [m.id async for m in client.models.list()]
    assert models == [SMOLLM2.name]


BAD_REQUESTS: list[tuple[str, Any, str | None]] = [
    ("chat/completions", b"{not json", None),
    ("chat/completions", [1, 2], None),
    ("chat/completions", {"model": "m"}, "messages"),
    ("chat/completions", {"messages": []}, "messages"),
    ("chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
    ("chat/completions", {"messages": HELLO, "temperature": 7}, "temperature"),
    ("chat/completions", {"messages": HELLO, "max_tokens": 0}, "max_tokens"),
    ("chat/completions", {"messages": HELLO, "n": 2}, "n"),
    ("chat/completions", {"messages": HELLO, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ("chat/completions", {"messages": HELLO, "tools": [{"type": "function"}]}, "tools"),
    (
        "chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
        "messages.0.content",
    ),
    ("chat/completions", {"messages": [{"role": "user", "content": "word " * 3000}]}, "messages"),
    ("completions", {"prompt": ["a", "b"]}, "prompt"),
    ("completions", {"max_tokens": 3}, "prompt"),
    ("embeddings", {"model": "m", "input": "hi"}, "model"),
]


@pytest.mark.parametrize(("path", "body", "param"), BAD_REQUESTS)
async def test_bad_requests_get_an_openai_error_naming_the_field(
    smollm2_url: str, path: str, body: Any, param: str | None
) -> None:
    async with aiohttp.ClientSession() as http:
        kwargs: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
        async with http.post(f"{smollm2_url}/{path}", **kwargs) as response:
            assert response.status == 400
            payload = await response.json()
    assert set(payload) == {"error"}
    error = payload["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"] and "Traceback" not in error["message"]


async def test_sdk_sees_bad_request_and_embeddings_as_400(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model=SMOLLM2.name, messages=HELLO, temperature=9)
    assert "temperature" in caught.value.message
    with pytest.raises(openai.BadRequestError, match="does not serve embeddings"):
        await client.embeddings.create(model=SMOLLM2.name, input="hi")


async def test_unknown_route_is_an_openai_404(smollm2_url: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{smollm2_url}/nope") as response:
            assert response.status == 404
            assert (await response.json())["error"]["code"] == "not_found"


async def test_client_disconnect_mid_stream_leaves_the_worker_serving(
    smollm2_url: str, client: openai.AsyncOpenAI
) -> None:
    body = {"model": SMOLLM2.name, "messages": HELLO, "max_tokens": 16, "temperature": 0, "stream": True}
    async with aiohttp.ClientSession() as http:
        response = await http.post(f"{smollm2_url}/chat/completions", json=body)
        assert response.status == 200
        first = await response.content.readuntil(b"\n\n")
        assert first.startswith(b"data: {")
        response.close()  # drop the connection with the generation still running

    async with aiohttp.ClientSession() as http:
        async with http.get(smollm2_url.removesuffix("/v1") + "/health") as health:
            assert health.status == 200 and await health.json() == {"status": "ok"}
    reply = await client.chat.completions.create(model=SMOLLM2.name, messages=HELLO, max_tokens=4)
    assert reply.choices[0].message.content


async def test_concurrent_requests_are_served_one_after_another(client: openai.AsyncOpenAI) -> None:
    async def ask(question: str) -> str | None:
        reply = await client.chat.completions.create(
            model=SMOLLM2.name, messages=[{"role": "user", "content": question}], max_tokens=4, temperature=0
        )
        return reply.choices[0].message.content

    answers = await asyncio.gather(ask("Name a color."), ask("Name a fruit."), ask("Name a color."))
    assert all(answers)
    assert answers[0] == answers[2]  # no cross-talk between queued generations


GREEDY_QUESTIONS = ("Name a color.", "Name a fruit.", "Name a color.", "Name a color.", "Name a fruit.",
                    "Say hello in three words.", "Name a fruit.", "Name a color.")


async def _greedy(client: openai.AsyncOpenAI, question: str) -> str | None:
    reply = await client.chat.completions.create(
        model=SMOLLM2.name, messages=[{"role": "user", "content": question}], max_tokens=8, temperature=0
    )
    return reply.choices[0].message.content


async def test_a_greedy_answer_does_not_depend_on_what_was_generated_before(client: openai.AsyncOpenAI) -> None:
    """The same greedy request, repeated and interleaved with others, always gets the same answer.

    Reusing the previous generation's KV cache made a repeat evaluate only the prompt's last token, a
    one-token batch whose logits differ from the whole prompt's ("Name a color." after itself)."""
    answers = [await _greedy(client, q) for q in GREEDY_QUESTIONS]
    by_question: dict[str, set[str | None]] = {}
    for question, answer in zip(GREEDY_QUESTIONS, answers, strict=True):
        by_question.setdefault(question, set()).add(answer)
    assert all(a for a in answers)
    assert {q: len(a) for q, a in by_question.items()} == {q: 1 for q in by_question}, by_question


async def test_concurrent_greedy_answers_match_the_sequential_ones(client: openai.AsyncOpenAI) -> None:
    sequential = {q: await _greedy(client, q) for q in dict.fromkeys(GREEDY_QUESTIONS)}
    concurrent = await asyncio.gather(*(_greedy(client, q) for q in GREEDY_QUESTIONS))
    assert list(concurrent) == [sequential[q] for q in GREEDY_QUESTIONS]


async def test_metrics_report_load_and_memory_pressure(smollm2_url: str, client: openai.AsyncOpenAI) -> None:
    from sits.backends.engine_metrics import parse_engine_metrics

    base = smollm2_url.removesuffix("/v1")

    async def scrape() -> Any:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/metrics") as response:
                assert response.status == 200
                return parse_engine_metrics(await response.text())

    idle = await scrape()
    assert idle is not None and (idle.engine, idle.running, idle.waiting) == ("sits-local", 0, 0)
    assert idle.memory_usage is not None and 0.0 < idle.memory_usage < 1.0  # a loaded model holds some
    story = [{"role": "user", "content": "Write a long story about a dragon who learns to paint."}]
    stream = await client.chat.completions.create(model=SMOLLM2.name, messages=story, max_tokens=1500, stream=True)
    queued = [asyncio.create_task(_greedy(client, "Name a color.")) for _ in range(2)]
    await stream.__anext__()  # the first generation is running; the two others queue behind it
    seen = []
    for _ in range(200):  # until both queued requests have reached the worker (bounded: 10 s)
        seen.append(await scrape())
        if seen[-1] is not None and seen[-1].waiting == 2:
            break
        await asyncio.sleep(0.05)
    await stream.close()
    await asyncio.gather(*queued)
    busy = seen[-1]
    assert busy is not None and busy.running == 1 and busy.waiting == 2, seen[-3:]


async def test_a_follow_up_turn_answers_alike_whatever_the_cache_holds(client: openai.AsyncOpenAI) -> None:
    """The second turn shares its prefix with the first turn's cached prompt and answer (reused), and is
    asked again after unrelated requests (little reused) and twice in a row (all but its tail reused)."""
    async def chat(messages: list[dict[str, str]]) -> str | None:
        reply = await client.chat.completions.create(model=SMOLLM2.name, messages=messages, max_tokens=8,
                                                     temperature=0)
        return reply.choices[0].message.content

    first = [{"role": "user", "content": "Name a color."}]
    answer = await chat(first)
    follow_up = [*first, {"role": "assistant", "content": answer or ""}, {"role": "user", "content": "Why that one?"}]
    right_after = await chat(follow_up)
    await chat([{"role": "user", "content": "Say hello in three words."}])
    after_others = await chat(follow_up)
    again = await chat(follow_up)
    assert right_after and right_after == after_others == again
