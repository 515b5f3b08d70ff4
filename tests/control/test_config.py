from __future__ import annotations

from pathlib import Path

import pytest

from sits.configuration.gateway import load_config, parse_config
from sits.configuration.embedded_default import config_from_backends, embedded_default_config
from sits.control.registry_records import records_from_config
from sits.control.table_builder import build_routing_table
from sits.errors import ConfigError

GOOD = {
    "models": [
        {"name": "llama3", "tier": "base", "aliases": ["chat-default"],
         "endpoints": [{"url": "http://10.0.0.1:8000/v1", "upstream_model": "meta/llama3", "weight": 2},
                       {"url": "https://api.example.com/v1/chat/completions", "api_key_env": "KEY"}]},
    ],
    "aliases": {"fast": "llama3"},
}


def test_valid_config_builds_a_routing_table():
    config = parse_config(GOOD)
    table = build_routing_table(records_from_config(config.models, {}), config.all_aliases(), {"KEY": "sk-1"})
    model = table.resolve("chat-default")
    assert model is not None and model.name == "llama3"
    assert table.resolve("fast") is model
    first, second = model.endpoints
    assert (first.host, first.port, first.base_path, first.upstream_model, first.weight) == (
        "10.0.0.1", 8000, "/v1", "meta/llama3", 2.0)
    # A full API URL is accepted and reduced to its base; https defaults to 443.
    assert (second.scheme, second.port, second.base_path, second.api_key) == ("https", 443, "/v1", "sk-1")
    assert "sk-1" not in repr(second)


@pytest.mark.parametrize(("mutate", "path"), [
    (lambda c: c["models"][0].update(colour="red"), "models[0].colour: unknown key"),
    (lambda c: c["models"][0]["endpoints"][1].update(url="ftp://x"), "models[0].endpoints[1].url"),
    (lambda c: c["models"][0]["endpoints"][0].update(weight="heavy"), "models[0].endpoints[0].weight"),
    (lambda c: c["models"][0]["endpoints"][0].update(weight=0), "models[0].endpoints[0].weight"),
    (lambda c: c["models"][0].update(tier="huge"), "models[0].tier"),
    (lambda c: c.update(aliases={"x": "missing"}), "aliases.x: points to unknown model"),
    (lambda c: c["models"].append(dict(c["models"][0], aliases=[])), "duplicate model name"),
    (lambda c: c["models"][0].update(endpoints=[]), "give either 'endpoints'"),
    (lambda c: c.update(server={"port": "80"}), "server.port"),
])
def test_invalid_config_names_the_offending_key(mutate, path):
    import copy

    raw = copy.deepcopy(GOOD)
    mutate(raw)
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert path in info.value.message


def test_missing_key_env_var_fails_at_startup_with_path():
    with pytest.raises(ConfigError) as info:
        build_routing_table(records_from_config(parse_config(GOOD).models, {}), {}, {})
    assert "model 'llama3' endpoint llama3/ep-1: environment variable KEY is not set" in info.value.message


def test_yaml_file_loading(tmp_path: Path):
    path = tmp_path / "sits.yaml"
    path.write_text("models:\n  - name: a\n    endpoints:\n      - url: http://127.0.0.1:1/v1\n")
    assert load_config(path).models[0].name == "a"
    path.write_text("models: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "absent.yaml")


def test_backend_flags_same_name_twice_gives_two_endpoints():
    config = config_from_backends(["a=http://127.0.0.1:1/v1", "a=http://127.0.0.1:2/v1", "b=http://127.0.0.1:3/v1"])
    table = build_routing_table(records_from_config(config.models, {}), {}, {})
    assert [len(m.endpoints) for m in table.models.values()] == [2, 1]
    assert table.models["a"].endpoints[1].upstream_model == "a"
    with pytest.raises(ConfigError, match="NAME=URL"):
        config_from_backends(["no-url"])


def test_embedded_default_has_two_local_tiers():
    config = embedded_default_config()
    assert [(m.name, m.tier, m.local is not None) for m in config.models] == [
        ("smollm2-135m", "tiny", True), ("gemma3-270m", "base", True)]
    assert config.server.host == "127.0.0.1"


def test_include_embedded_models_adds_them_next_to_remote_ones():
    from sits.configuration.embedded_default import with_embedded_models

    raw = {"include_embedded_models": True, "models": [
        {"name": "remote", "endpoints": [{"url": "http://127.0.0.1:1/v1"}]},
        {"name": "gemma3-270m", "tier": "heavy", "local": {"gguf": "/models/other.gguf"}}]}
    merged = with_embedded_models(parse_config(raw))
    assert [(m.name, m.tier) for m in merged.models] == [("remote", None), ("gemma3-270m", "heavy"),
                                                         ("smollm2-135m", "tiny")]
    plain = parse_config({"models": raw["models"]})
    assert with_embedded_models(plain) is plain


def test_bad_routing_policy_fails_at_startup_naming_the_key():
    with pytest.raises(ConfigError) as info:
        parse_config({"routing": {"profiles": {"default": {"filters": [], "scorers": [{"type": "no-such-scorer"}],
                                                           "picker": {"type": "max-score-picker"}}}}})
    assert "config: routing" in info.value.message and "no-such-scorer" in info.value.message
