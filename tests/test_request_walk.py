"""One chat request's way through the modules, recorded with a profiler hook (docs/architecture.md, "One
request's way"): the director calls its stages in order, each once, and nothing below it calls back into it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import aiohttp

from sits.hot_path import PURE_ENV
from sits.hot_path import STATE as HOT_PATH
from tests.conftest import base_url, one_model_config

# The modules a chat request's stages live in, in the order the request first enters them.
STAGES = ["api.openai_routes", "api.request_intake", "api.request_observer", "pipeline.director",
          "pipeline.model_resolution", "pipeline.admission_step", "pipeline.pool_planner", "pipeline.fallback",
          "pipeline.upstream_send", "backends.openai_upstream"]


def _module(frame: Any) -> str:
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name[5:] if name.startswith("sits.") else ""


async def _walk(gateway: Any, body: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(caller module, callee module, function) of every function entered while one request is served;
    a coroutine or generator resumed later is not entered again."""
    entries: list[tuple[str, str, str]] = []
    frames: list[Any] = []  # held so that a frame's identity is not reused while recording
    seen: set[int] = set()

    def on_event(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or id(frame) in seen:
            return
        seen.add(id(frame))
        frames.append(frame)
        callee = _module(frame)
        if callee:
            entries.append((_module(frame.f_back), callee, frame.f_code.co_name))

    url = base_url(gateway) + "/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        for _ in range(3):  # warm: connections, caches, lazily built state
            async with session.post(url, json=body) as response:
                assert response.status == 200
        sys.setprofile(on_event)
        try:
            async with session.post(url, json=body) as response:
                assert response.status == 200
                await response.read()
        finally:
            sys.setprofile(None)
    return entries


async def test_a_chat_request_enters_each_stage_in_order_and_nothing_below_calls_back_into_the_director(
        request, upstream, start_gateway):
    if HOT_PATH.compiled:  # a profiler sees no calls inside compiled modules: walk their source, in a child
        test = f"{__file__}::{request.node.name}"
        child = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
            env={**os.environ, PURE_ENV: "1"}, capture_output=True, text=True, timeout=300)
        assert child.returncode == 0 and "1 passed" in child.stdout, child.stdout[-4000:]
        return
    gateway = await start_gateway(one_model_config(upstream.url))
    entries = await _walk(gateway, {"model": "m1", "messages": [{"role": "user", "content": "hi"}]})

    first_entry = [module for module in dict.fromkeys(callee for _, callee, _ in entries) if module in STAGES]
    assert first_entry == STAGES, first_entry

    callers_of_director = {caller for caller, callee, _ in entries if callee == "pipeline.director"}
    assert callers_of_director <= {"api.openai_routes", "pipeline.director"}, callers_of_director

    from_director = [(callee, function) for caller, callee, function in entries
                     if caller == "pipeline.director" and callee in STAGES and callee != "pipeline.director"]
    assert len(from_director) == len(set(from_director)), from_director  # each stage's entry called once
    assert [callee for callee, _ in from_director if callee != "pipeline.fallback"] == [  # resolve, admit, schedule
        "pipeline.model_resolution", "pipeline.admission_step", "pipeline.pool_planner"]
    assert ("pipeline.fallback", "run") in from_director
