"""Fusion workflows end to end: a real gateway over loopback, the official openai SDK as the client,
real PDFs (fpdf2) as attachments. Scripted test upstreams play the drafting models so the outcome is
deterministic; one test drafts with the embedded local models."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web

from sits.app import Gateway
from sits.configuration.embedded_default import embedded_default_config
from sits.configuration.gateway import with_sections
from sits.pipeline.fusion.default_calibration import default_calibration
from sits.settings import Settings
from tests.conftest import base_url, sdk
from tests.pipeline.fusion.financial_reports import Report, correct_draft, make_report
from tests.upstream_server import FakeUpstream

ASK = "Extract the key metrics from the attached report and check them."


class ScriptedUpstream(FakeUpstream):
    """A FakeUpstream whose chat answers come from `reply(body)`: a drafting model that writes
    what the test needs (a correct draft, a draft with a planted wrong number, a judge's verdict)."""

    def __init__(self, name: str, reply: Callable[[dict[str, Any]], str]) -> None:
        super().__init__(name)
        self.reply = reply

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if (bad := await self._misbehave()) is not None:
            return bad
        return web.json_response({
            "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.reply(body)},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140},
        })


@pytest.fixture
def report() -> Report:
    return make_report(11)


def wrong_draft(report: Report) -> str:
    """The correct draft with one planted wrong number: cost of sales off by 10,000."""
    cost = report.row("Cost of sales").current
    return correct_draft(report).replace(f"${cost:,}", f"${cost + 10_000:,}")


@pytest.fixture
async def drafters(report: Report) -> AsyncIterator[tuple[ScriptedUpstream, ScriptedUpstream]]:
    good = ScriptedUpstream("good", lambda body: correct_draft(report))
    bad = ScriptedUpstream("bad", lambda body: wrong_draft(report))
    for server in (good, bad):
        await server.start()
    yield good, bad
    for server in (good, bad):
        await server.stop()


def fusion_config(good: FakeUpstream, bad: FakeUpstream, **workflow: Any) -> dict[str, Any]:
    spec = {
        "steps": [
            {"kind": "parse_document"},
            {"kind": "generate", "name": "draft", "instructions": "Answer from the document only.",
             "branches": [{"model": "careful", "weight": 1.0}, {"model": "sloppy", "weight": 2.0}]},
            {"kind": "verify"},
            {"kind": "aggregate", "method": "best_of_n"},
        ],
    } | workflow
    return {
        "server": {"drain_timeout_s": 2},
        "models": [{"name": "careful", "endpoints": [{"url": good.url}], "cost_per_1k_input": 0.001,
                    "cost_per_1k_output": 0.002},
                   {"name": "sloppy", "endpoints": [{"url": bad.url}]}],
        "workflows": {"fin-check": spec},
    }


def pdf_part(data: bytes, filename: str = "report.pdf", media_type: str = "application/pdf") -> dict[str, Any]:
    encoded = base64.b64encode(data).decode()
    return {"type": "file", "file": {"filename": filename, "file_data": f"data:{media_type};base64,{encoded}"}}


def ask_with(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": ASK}, *parts]}]


async def test_best_of_n_picks_the_verified_draft_and_reports_every_step(drafters, report, start_gateway):
    good, bad = drafters
    gateway = await start_gateway(fusion_config(good, bad, description="Key metrics, checked"))
    listed = {m.id: m async for m in sdk(gateway).models.list()}
    assert listed["workflow:fin-check"].model_extra["description"] == "Key metrics, checked"
    raw = await sdk(gateway).chat.completions.with_raw_response.create(
        model="workflow:fin-check", messages=ask_with(pdf_part(report.pdf)))
    answer = raw.parse()
    assert answer.choices[0].message.content == correct_draft(report)
    assert answer.model == "workflow:fin-check"
    sits = answer.model_extra["sits"]
    assert sits["aggregation"]["method"] == "best_of_n" and sits["aggregation"]["model"] == "careful"
    # every figure of the chosen draft checks out (verifier score 1), mapped by the packaged calibration
    assert sits["confidence_raw"] == 1.0
    assert sits["confidence"] == pytest.approx(default_calibration()(1.0), abs=1e-4) and sits["confidence"] < 1.0
    assert sits["verifier"]["summary"].endswith("mismatches=0")
    drafts = [s for s in sits["steps"] if s["kind"] == "generate"]
    assert {(s["model"], s["status"]) for s in drafts} == {("careful", "ok"), ("sloppy", "ok")}
    assert all(s["latency_ms"] > 0 and s["endpoint"] for s in drafts)
    verify = {s["branch"]: s for s in sits["steps"] if s["kind"] == "verify"}
    assert verify[0]["score"] == 1.0 and verify[1]["score"] < 1.0
    parse = next(s for s in sits["steps"] if s["kind"] == "parse_document")
    assert "1 page, 2 tables" in parse["detail"]
    assert raw.headers["x-sits-workflow"] == "fin-check"
    assert float(raw.headers["x-sits-confidence"]) == pytest.approx(sits["confidence"], abs=1e-4)
    assert raw.headers["x-sits-verifier"].startswith("checked=")
    assert answer.usage.prompt_tokens == 200 and answer.usage.completion_tokens == 80  # both drafts counted
    assert sits["budget"]["cost_usd"] == pytest.approx(100 / 1000 * 0.001 + 40 / 1000 * 0.002)
    # The drafting models saw the parsed document (tables as Markdown) and no file part.
    sent = good.log.requests[-1]["messages"]
    assert sent[0] == {"role": "system", "content": "Answer from the document only."}
    assert isinstance(sent[1]["content"], str) and "| Cost of sales |" in sent[1]["content"]
    assert f"{report.row('Revenue').current:,}" in sent[1]["content"]


async def test_the_planted_wrong_number_is_reported(drafters, report, start_gateway):
    good, bad = drafters
    config = fusion_config(good, bad)
    config["workflows"]["fin-check"]["steps"][1]["branches"] = [{"model": "sloppy"}]
    gateway = await start_gateway(config)
    answer = await sdk(gateway).chat.completions.create(model="workflow:fin-check",
                                                        messages=ask_with(pdf_part(report.pdf)))
    sits = answer.model_extra["sits"]
    wrong = [f for f in sits["verifier"]["findings"] if f["status"] not in ("supported", "derived", "correct")]
    cost = report.row("Cost of sales").current
    assert [f["text"] for f in wrong] == [f"${cost + 10_000:,}"]
    assert f"{cost:,}" in wrong[0]["detail"]  # says what the source holds
    assert sits["confidence_raw"] == pytest.approx(11 / 12, abs=0.05) and sits["confidence"] < 0.5


async def test_streaming_sends_the_final_answer_as_sse_ending_with_done(drafters, report, start_gateway):
    good, bad = drafters
    gateway = await start_gateway(fusion_config(good, bad))
    stream = await sdk(gateway).chat.completions.create(
        model="workflow:fin-check", messages=ask_with(pdf_part(report.pdf)), stream=True,
        stream_options={"include_usage": True})
    text, extension, usage = "", None, None
    async for chunk in stream:
        text += "".join(c.delta.content or "" for c in chunk.choices)
        extension = (chunk.model_extra or {}).get("sits") or extension
        usage = chunk.usage or usage
    assert text == correct_draft(report)
    assert extension is not None and extension["aggregation"]["model"] == "careful"
    assert usage is not None and usage.completion_tokens == 80
    async with aiohttp.ClientSession() as session, session.post(
            base_url(gateway) + "/v1/chat/completions",
            json={"model": "workflow:fin-check", "stream": True, "messages": ask_with(pdf_part(report.pdf))}) as raw:
        assert raw.headers["content-type"] == "text/event-stream"
        assert (await raw.text()).endswith("data: [DONE]\n\n")


async def test_uploaded_file_is_used_by_id(drafters, report, start_gateway):
    good, bad = drafters
    gateway = await start_gateway(fusion_config(good, bad))
    client = sdk(gateway)
    uploaded = await client.files.create(file=("q3.pdf", report.pdf), purpose="user_data")  # type by content
    assert uploaded.id.startswith("file-") and uploaded.bytes == len(report.pdf) and uploaded.filename == "q3.pdf"
    answer = await client.chat.completions.create(
        model="workflow:fin-check",
        messages=ask_with({"type": "file", "file": {"file_id": uploaded.id}}))
    assert answer.choices[0].message.content == correct_draft(report)
    parse = next(s for s in answer.model_extra["sits"]["steps"] if s["name"] == "parse")
    assert "q3.pdf: 1 page" in parse["detail"] and "(cached)" in parse["detail"]  # parsed once, at upload


@pytest.mark.parametrize(("part", "status", "words"), [
    (pdf_part(make_report(3, user_password="s3cret").pdf, "locked.pdf"), 422, "'locked.pdf' is encrypted"),
    (pdf_part(b"%PDF-1.7\n" + b"\x00garbage" * 50, "broken.pdf"), 422, "'broken.pdf' is not a readable PDF"),
    (pdf_part(b"PK\x03\x04 not a pdf at all", "sheet.pdf"), 422, "'sheet.pdf' is not a PDF"),
    (pdf_part(b"\x89PNG\r\n", "chart.png", "image/png"), 422, "file type 'image/png' is not supported"),
    (pdf_part(b"%PDF-" + b"x" * 5000, "big.pdf"), 413, "the limit is 4096"),
])
async def test_bad_attachments_get_a_clear_error(drafters, start_gateway, part, status, words):
    good, bad = drafters
    config = fusion_config(good, bad) | {"attachments": {"max_file_bytes": 4096}}
    if "big.pdf" not in str(part):
        config["attachments"]["max_file_bytes"] = 1024 * 1024
    gateway = await start_gateway(config)
    with pytest.raises(openai.APIStatusError) as info:
        await sdk(gateway).chat.completions.create(model="workflow:fin-check", messages=ask_with(part))
    assert info.value.status_code == status
    assert words in info.value.message
    assert info.value.body["param"] == "messages[0].content[1].file.file_data"
    assert not good.log.requests and not bad.log.requests  # refused before any model was called


async def test_bad_uploads_are_refused_at_the_door(drafters, start_gateway):
    good, bad = drafters
    gateway = await start_gateway(fusion_config(good, bad))
    client = sdk(gateway)
    with pytest.raises(openai.UnprocessableEntityError) as info:
        await client.files.create(file=("locked.pdf", make_report(4, user_password="pw").pdf, "application/pdf"),
                                  purpose="user_data")
    assert "encrypted" in info.value.message
    with pytest.raises(openai.UnprocessableEntityError) as info:
        await client.files.create(file=("x.exe", b"MZ\x90\x00", "application/x-msdownload"), purpose="user_data")
    assert "not supported" in info.value.message
    with pytest.raises(openai.UnprocessableEntityError) as info:
        await client.chat.completions.create(model="workflow:fin-check",
                                             messages=ask_with({"type": "file", "file": {"file_id": "file-nope"}}))
    assert "no uploaded file with id 'file-nope'" in info.value.message


async def test_a_step_falls_back_like_any_request(report, start_gateway):
    broken = ScriptedUpstream("broken", lambda body: "never")
    broken.mode = "error500"
    backup = ScriptedUpstream("backup", lambda body: correct_draft(report))
    for server in (broken, backup):
        await server.start()
    try:
        gateway = await start_gateway({
            "server": {"drain_timeout_s": 2},
            "models": [{"name": "primary", "endpoints": [{"url": broken.url}], "fallbacks": ["secondary"]},
                       {"name": "secondary", "endpoints": [{"url": backup.url}]}],
            "workflows": {"one": {"steps": [{"kind": "parse_document"},
                                            {"kind": "generate", "branches": [{"model": "primary"}]},
                                            {"kind": "verify"}]}},
        })
        answer = await sdk(gateway).chat.completions.create(model="workflow:one",
                                                            messages=ask_with(pdf_part(report.pdf)))
        draft = next(s for s in answer.model_extra["sits"]["steps"] if s["kind"] == "generate")
        assert draft["model"] == "secondary" and draft["status"] == "ok"
        assert broken.log.requests  # the primary was tried first
    finally:
        for server in (broken, backup):
            await server.stop()


async def test_latency_budget_cancels_a_late_branch(drafters, report, start_gateway):
    good, bad = drafters
    bad.mode = "hang"
    gateway = await start_gateway(fusion_config(good, bad, budget={"max_latency_s": 1.0}))
    answer = await sdk(gateway).chat.completions.create(model="workflow:fin-check",
                                                        messages=ask_with(pdf_part(report.pdf)))
    drafts = {s["model"]: s for s in answer.model_extra["sits"]["steps"] if s["kind"] == "generate"}
    assert drafts["careful"]["status"] == "ok" and drafts["sloppy"]["status"] == "timeout"
    assert answer.choices[0].message.content == correct_draft(report)


async def test_cost_budget_skips_calls_it_cannot_afford(drafters, report, start_gateway):
    good, bad = drafters
    config = fusion_config(good, bad, budget={"max_cost_usd": 0.0005})
    config["models"][0]["cost_per_1k_output"] = 1.0  # careful: max_tokens 100 -> $0.1 worst case
    config["workflows"]["fin-check"]["steps"][1]["max_tokens"] = 100
    gateway = await start_gateway(config)
    answer = await sdk(gateway).chat.completions.create(model="workflow:fin-check",
                                                        messages=ask_with(pdf_part(report.pdf)))
    drafts = {s["model"]: s for s in answer.model_extra["sits"]["steps"] if s["kind"] == "generate"}
    assert drafts["careful"]["status"] == "skipped" and "cost budget" in drafts["careful"]["detail"]
    assert not good.log.requests
    assert answer.model_extra["sits"]["aggregation"]["model"] == "sloppy"


async def test_panel_judge_and_weighted_vote(start_gateway):
    a = ScriptedUpstream("a", lambda body: "Paris.")
    b = ScriptedUpstream("b", lambda body: "paris")
    judge = ScriptedUpstream("judge", lambda body: "2")
    for server in (a, b, judge):
        await server.start()
    try:
        models = [{"name": n, "endpoints": [{"url": s.url}]} for n, s in (("a", a), ("b", b), ("j", judge))]
        gateway = await start_gateway({"server": {"drain_timeout_s": 2}, "models": models, "workflows": {
            "vote": {"steps": [{"kind": "generate", "branches": [{"model": "a", "weight": 1}, {"model": "b"}]},
                               {"kind": "aggregate", "method": "weighted_vote"}]},
            "panel": {"steps": [{"kind": "generate", "branches": [{"model": "a"}, {"model": "b"}]},
                                {"kind": "aggregate", "method": "panel_judge", "judge": {"model": "j"}}]},
        }})
        client = sdk(gateway)
        question = [{"role": "user", "content": "What is the capital of France?"}]
        vote = await client.chat.completions.create(model="workflow:vote", messages=question)
        assert vote.model_extra["sits"]["confidence"] == 1.0  # both drafts agree: all the weight
        panel = await client.chat.completions.create(model="workflow:panel", messages=question)
        assert panel.choices[0].message.content == "paris"
        assert panel.model_extra["sits"]["aggregation"]["detail"] == "judge picked draft 2 of 2"
        assert "CANDIDATES" in judge.log.requests[-1]["messages"][1]["content"]
    finally:
        for server in (a, b, judge):
            await server.stop()


async def test_intent_route_reaches_a_workflow(drafters, report, start_gateway):
    good, bad = drafters
    config = fusion_config(good, bad)
    config["understanding"] = {"enabled": True, "embedder": "charngram",
                               "routes": [{"intent": "coding", "workflow": "fin-check", "min_confidence": 0.5}]}
    gateway = await start_gateway(config)
    raw = await sdk(gateway).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": [
            {"type": "text", "text": "Fix this Python function:\n```python\ndef f(x):\n    return x +\n```"},
            pdf_part(report.pdf)]}])
    assert raw.headers["x-sits-workflow"] == "fin-check"
    assert raw.headers["x-sits-intent"].startswith("coding")


async def test_unknown_workflow_and_bad_config(drafters, start_gateway):
    good, bad = drafters
    gateway = await start_gateway(fusion_config(good, bad))
    with pytest.raises(openai.NotFoundError) as info:
        await sdk(gateway).chat.completions.create(model="workflow:nope", messages=ask_with())
    assert "workflow:fin-check" in info.value.message
    config = fusion_config(good, bad)
    config["workflows"]["fin-check"]["steps"][1]["branches"][0] = {"model": "ghost"}
    with pytest.raises(Exception, match=r"workflows\.fin-check\.steps\[1\]\.branches\[0\]\.model: unknown model"):
        await start_gateway(config)


async def test_local_models_draft_a_workflow(tmp_path_factory, report):
    """The embedded models (SmolLM2, Gemma 3 270M) as generators, for real: small answers, but every step."""
    config = with_sections(embedded_default_config(), workflows={"local": {
        "budget": {"max_latency_s": 240},
        "steps": [{"kind": "parse_document", "max_context_chars": 1500},
                  {"kind": "generate", "max_tokens": 12, "temperature": 0,
                   "branches": [{"model": "smollm2-135m"}, {"model": "gemma3-270m"}]},
                  {"kind": "verify"}, {"kind": "aggregate", "method": "best_of_n"}]}})
    data_dir = tmp_path_factory.getbasetemp().parent / "sits-data"  # shared with test_local_models
    gateway = Gateway(Settings(host="127.0.0.1", port=0, data_dir=data_dir), config)
    await gateway.start()
    try:
        answer = await sdk(gateway, timeout=240).chat.completions.create(
            model="workflow:local", messages=[{"role": "user", "content": [
                {"type": "text", "text": "What was the revenue?"}, pdf_part(report.pdf)]}])
    finally:
        await gateway.stop()
    sits = answer.model_extra["sits"]
    drafts = {s["model"]: s for s in sits["steps"] if s["kind"] == "generate"}
    assert set(drafts) == {"smollm2-135m", "gemma3-270m"}
    assert all(s["status"] == "ok" and s["usage"]["completion_tokens"] > 0 for s in drafts.values())
    assert answer.choices[0].message.content.strip()
    assert sits["aggregation"]["model"] in drafts
    assert sits["confidence"] == pytest.approx(default_calibration()(sits["confidence_raw"]), abs=1e-4)


async def test_llm_judge_verifier_ranks_the_drafts(start_gateway):
    a = ScriptedUpstream("a", lambda body: "Lyon")
    b = ScriptedUpstream("b", lambda body: "Paris")
    judge = ScriptedUpstream("judge", lambda body: "PASS: matches" if "ANSWER:\nParis" in
                             body["messages"][-1]["content"] else "FAIL: wrong city")
    for server in (a, b, judge):
        await server.start()
    try:
        models = [{"name": n, "endpoints": [{"url": s.url}]} for n, s in (("a", a), ("b", b), ("j", judge))]
        gateway = await start_gateway({"server": {"drain_timeout_s": 2}, "models": models, "workflows": {"judged": {
            "steps": [{"kind": "generate", "branches": [{"model": "a", "weight": 3}, {"model": "b"}]},
                      {"kind": "verify", "symbolic": False, "judge": {"model": "j"}},
                      {"kind": "aggregate", "method": "best_of_n"}]}}})
        answer = await sdk(gateway).chat.completions.create(
            model="workflow:judged", messages=[{"role": "user", "content": "Capital of France? Source: Paris."}])
        assert answer.choices[0].message.content == "Paris"  # the judge outweighs the heavier branch
        judges = [s for s in answer.model_extra["sits"]["steps"] if s["kind"] == "judge"]
        assert sorted(s["detail"][:4] for s in judges) == ["FAIL", "PASS"] and len(judge.log.requests) == 2
    finally:
        for server in (a, b, judge):
            await server.stop()


async def test_workflows_answer_chat_only_and_uploads_need_a_form(drafters, start_gateway):
    good, bad = drafters
    gateway = await start_gateway(fusion_config(good, bad))
    with pytest.raises(openai.BadRequestError, match="answers /v1/chat/completions only"):
        await sdk(gateway).completions.create(model="workflow:fin-check", prompt="hi")
    async with aiohttp.ClientSession() as session:
        async with session.post(base_url(gateway) + "/v1/files", json={"file": "x"}) as raw:
            assert raw.status == 400 and "multipart/form-data" in (await raw.json())["error"]["message"]
        form = aiohttp.FormData()
        form.add_field("file", b"Revenue 1,000", filename="notes.txt", content_type="text/plain")
        async with session.post(base_url(gateway) + "/v1/files", data=form) as raw:
            assert raw.status == 422 and (await raw.json())["error"]["param"] == "purpose"


async def test_workflow_steps_are_traced_under_the_request(drafters, report, start_gateway):
    from tests.otlp_receiver import OtlpReceiver

    good, bad = drafters
    receiver = OtlpReceiver()
    await receiver.start()
    try:
        gateway = await start_gateway(fusion_config(good, bad) | {"telemetry": {"tracing": {"endpoint": receiver.url}}})
        await sdk(gateway).chat.completions.create(model="workflow:fin-check", messages=ask_with(pdf_part(report.pdf)))
        spans = await receiver.wait_for(lambda s: sum(x.kind == 3 for x in s) >= 2 and any(x.kind == 2 for x in s))
    finally:
        await receiver.stop()
    by_name: dict[str, list[Any]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    server = by_name["POST /v1/chat/completions"][0]
    stages = ["sits.workflow.parse", "sits.workflow.generate", "sits.workflow.verify", "sits.workflow.aggregate"]
    assert all(by_name[name][0].parent_span_id == server.span_id for name in stages)
    calls = by_name["sits.workflow.call"]
    assert sorted(c.attributes["gen_ai.request.model"] for c in calls) == ["careful", "sloppy"]
    assert all(c.parent_span_id == server.span_id for c in calls)
    # each model call's upstream attempt hangs under that call's span
    attempts = {s.attributes["sits.model"]: s for s in spans if s.kind == 3}
    call_of = {c.attributes["gen_ai.request.model"]: c for c in calls}
    assert attempts["careful"].parent_span_id == call_of["careful"].span_id
    assert attempts["sloppy"].parent_span_id == call_of["sloppy"].span_id
