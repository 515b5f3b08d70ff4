"""`embedder: cascade` in a real gateway: model "auto" answers with the stage that decided in x-sits-intent."""

from __future__ import annotations

import yaml

from tests.conftest import sdk

DOMAINS = {"domains": [
    {"name": "greeting", "description": "say hello", "examples": ["hello there", "hi how are you", "good morning"]},
    {"name": "weather", "description": "ask about the weather",
     "examples": ["will it rain tomorrow", "how hot is it today", "is it sunny outside"], "rules": ["umbrella"]},
]}


def _config(upstream_url: str, coder_url: str, domains_file: str, min_margin: float) -> dict:
    return {
        "server": {"drain_timeout_s": 2},
        "understanding": {"enabled": True, "embedder": "cascade", "domains_file": domains_file,
                          "classify_timeout_ms": 2000,  # a loaded CI machine must not turn e5 into a fallback
                          "cascade": {"min_margin": min_margin},
                          "routes": [{"intent": "weather", "model": "sky", "min_confidence": 0.5}]},
        "models": [{"name": "chat", "tier": "tiny", "endpoints": [{"url": upstream_url}]},
                   {"name": "sky", "tier": "base", "endpoints": [{"url": coder_url}]}],
    }


async def _ask(gateway, text: str):
    return await sdk(gateway).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": text}])


async def test_unsure_prompts_escalate_to_e5_and_rules_skip_both(upstream, upstream_b, start_gateway, tmp_path):
    domains = tmp_path / "domains.yaml"
    domains.write_text(yaml.safe_dump(DOMAINS), "utf-8")
    gateway = await start_gateway(_config(upstream.url, upstream_b.url, str(domains), min_margin=1.0))
    escalated = await _ask(gateway, "will it be sunny tomorrow")
    assert escalated.headers["x-sits-intent"].startswith("weather; confidence=")
    assert escalated.headers["x-sits-intent"].endswith("source=embedding:e5")
    assert escalated.headers["x-sits-model"] == "sky"
    ruled = await _ask(gateway, "do I need an umbrella")
    assert ruled.headers["x-sits-intent"] == "weather; confidence=0.90; source=rules"


async def test_sure_prompts_stay_on_the_fast_stage(upstream, upstream_b, start_gateway, tmp_path):
    domains = tmp_path / "domains.yaml"
    domains.write_text(yaml.safe_dump(DOMAINS), "utf-8")
    gateway = await start_gateway(_config(upstream.url, upstream_b.url, str(domains), min_margin=0.0))
    answer = await _ask(gateway, "hello there, good morning")
    assert answer.headers["x-sits-intent"].startswith("greeting; confidence=")
    assert answer.headers["x-sits-intent"].endswith("source=embedding:charngram")
    assert answer.headers["x-sits-model"] == "chat"
