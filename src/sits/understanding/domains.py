"""Task domains for the intent classifier, loaded from YAML (a name, a description, examples, rules)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sits.errors import ConfigError

DEFAULT_DOMAINS_RESOURCE = "default_domains.yaml"


@dataclass(frozen=True, slots=True)
class Domain:
    name: str
    description: str
    examples: tuple[str, ...]
    rules: tuple[re.Pattern[str], ...] = ()
    quality_critical: bool = False  # `auto` never moves its requests to a lighter tier under load


class _DomainModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Annotated[str, Field(min_length=1)]
    description: str = ""
    examples: list[str] = []
    rules: list[str] = []
    quality_critical: bool = False


class _DomainsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    domains: Annotated[list[_DomainModel], Field(min_length=1)]


def parse_domains(data: object, source: str) -> tuple[Domain, ...]:
    """Validate parsed YAML; errors name the file and the offending key."""
    try:
        parsed = _DomainsFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{source}: {where}: {first['msg']}") from None
    seen: set[str] = set()
    out = []
    for i, d in enumerate(parsed.domains):
        if d.name in seen:
            raise ConfigError(f"{source}: domains.{i}.name: duplicate domain {d.name!r}")
        seen.add(d.name)
        if not d.examples and not d.description:
            raise ConfigError(f"{source}: domains.{i}: give a description or examples")
        patterns = []
        for j, rule in enumerate(d.rules):
            try:
                patterns.append(re.compile(rule, re.IGNORECASE))
            except re.error as exc:
                raise ConfigError(f"{source}: domains.{i}.rules.{j}: bad regex: {exc}") from None
        out.append(Domain(d.name, d.description, tuple(d.examples), tuple(patterns), d.quality_critical))
    return tuple(out)


def load_domains(path: Path | None = None) -> tuple[Domain, ...]:
    """Domains from `path`, or the packaged defaults when `path` is None."""
    if path is None:
        text = resources.files("sits.understanding").joinpath(DEFAULT_DOMAINS_RESOURCE).read_text("utf-8")
        source = DEFAULT_DOMAINS_RESOURCE
    else:
        try:
            text = path.read_text("utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read domains file {path}: {exc.strerror}") from None
        source = str(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    return parse_domains(data, source)


def domains_from_examples(rows: list[tuple[str, str]]) -> tuple[Domain, ...]:
    """Domains built from labelled (prompt, label) rows: each label's prompts become its examples."""
    by_label: dict[str, list[str]] = {}
    for prompt, label in rows:
        by_label.setdefault(label, []).append(prompt)
    return tuple(Domain(label, "", tuple(prompts)) for label, prompts in sorted(by_label.items()))
