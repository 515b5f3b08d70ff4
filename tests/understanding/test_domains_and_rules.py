from __future__ import annotations

from pathlib import Path

import pytest

from sits.errors import ConfigError
from sits.understanding.domains import domains_from_examples, load_domains, parse_domains
from sits.understanding.rules_stage import RulesStage

DEFAULTS = ("compliance_review", "multi_hop_qa", "structured_summary", "contract_analysis",
            "financial_metrics_extraction", "coding", "math", "translation", "general_chat")


def test_default_domains_load_with_examples_in_english_and_chinese():
    domains = load_domains()
    assert tuple(d.name for d in domains) == DEFAULTS
    for d in domains:
        assert d.description and len(d.examples) >= 5
        assert any(any("\u4e00" <= c <= "\u9fff" for c in e) for e in d.examples), d.name


@pytest.mark.parametrize(("data", "where"), [
    ({"domains": [{"name": "a", "examples": ["x"], "bogus": 1}]}, "domains.0.bogus"),
    ({"domains": []}, "domains"),
    ({"domains": [{"name": "a", "examples": ["x"]}, {"name": "a", "examples": ["y"]}]}, "domains.1.name"),
    ({"domains": [{"name": "a", "rules": ["("], "examples": ["x"]}]}, "domains.0.rules.0"),
    ({"domains": [{"name": "a"}]}, "domains.0"),
])
def test_bad_domain_files_name_the_key(data, where):
    with pytest.raises(ConfigError, match=where):
        parse_domains(data, "f.yaml")


def test_missing_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_domains(tmp_path / "nope.yaml")


def test_domains_from_examples_groups_by_label():
    domains = domains_from_examples([("a1", "a"), ("b1", "b"), ("a2", "a")])
    assert [(d.name, d.examples) for d in domains] == [("a", ("a1", "a2")), ("b", ("b1",))]


@pytest.mark.parametrize(("text", "label"), [
    ("```python\nprint(1)\n```", "coding"),
    ("Translate this sentence into French: hello", "translation"),
    ("请把这句话翻译成英文", "translation"),
    ("Extract revenue and EBITDA from this 10-K", "financial_metrics_extraction"),
    ("Is the indemnification clause one-sided?", "contract_analysis"),
    ("Solve the equation 3x + 1 = 10", "math"),
])
def test_default_rules(text, label):
    guess = RulesStage(load_domains()).match(text)
    assert guess is not None and guess.label == label and guess.source == "rules"


def test_no_rule_hit_falls_back_with_low_confidence():
    stage = RulesStage(load_domains())
    assert stage.match("hello there") is None
    guess = stage.decide("hello there")
    assert (guess.label, guess.source) == ("general_chat", "fallback") and guess.confidence < 0.5
