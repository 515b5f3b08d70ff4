"""The composed schema: every section is validated when the config is loaded, errors name the key's path."""

from __future__ import annotations

import pytest

from sits.configuration.embedded_default import embedded_default_config
from sits.configuration.gateway import parse_config, with_sections
from sits.errors import ConfigError


@pytest.mark.parametrize(("section", "raw", "path"), [
    ("routing", {"stats_refresh_s": 0}, "routing.stats_refresh_s"),
    ("understanding", {"enabled": True, "no_such_key": 1}, "understanding.no_such_key: unknown key"),
    ("workflows", {"review": {"steps": "not-a-list"}}, "workflows.review"),
    ("attachments", {"max_files": 0}, "attachments.max_files"),
    ("tenants", {"spend_log": {"batch_rows": 0}}, "tenants.spend_log.batch_rows"),
    ("tenants", {"database": "x"}, "tenants.database: unknown key"),
    ("tenants", {"limits": {"max_batch": -1}}, "tenants.limits.max_batch"),
])
def test_a_bad_section_fails_at_load_naming_its_path(section, raw, path):
    with pytest.raises(ConfigError) as info:
        parse_config({section: raw}, source="sits.yaml")
    assert f"sits.yaml: {path}" in info.value.message


def test_sections_are_typed_values_after_load():
    config = parse_config({"routing": {"stats_refresh_s": 0.5}, "attachments": {"max_files": 3},
                           "understanding": {"cascade": {"min_margin": 0.2}}})
    assert config.routing.stats_refresh_s == 0.5
    assert config.attachments.max_files == 3
    assert config.understanding.cascade.min_margin == 0.2
    assert config.understanding.enabled is False  # a section without `enabled: true` keeps understanding off
    assert parse_config({"understanding": {"enabled": True}}).understanding.enabled is True
    assert parse_config({}).workflows.root == {}


def test_with_sections_validates_the_replaced_section_and_keeps_the_rest():
    base = embedded_default_config()
    changed = with_sections(base, attachments={"max_files": 2})
    assert changed.attachments.max_files == 2
    assert changed.models == base.models and changed.control == base.control
    with pytest.raises(ConfigError) as info:
        with_sections(base, "test", attachments={"max_files": -1})
    assert "test: attachments.max_files" in info.value.message
