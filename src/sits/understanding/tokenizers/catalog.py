"""Which tokenizer each model uses, loaded once at startup; exact counts on the request path.

Sources, by family name:
- `<data dir>/tokenizers/<family>/tokenizer.json` (a Hugging Face tokenizer directory), or
  `<data dir>/tokenizers/<family>/*.gguf` / `<data dir>/tokenizers/<family>.gguf` (a GGUF vocabulary);
- the embedded local models' own GGUF files (family = the model's name).

A model uses the family named by its `tokenizer_family` (set when it is registered), else the
family named like the model itself. Loading builds (or reads from the disk cache) each family's
map and its counter; it is blocking and runs in a thread before the gateway serves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sits.errors import ConfigError
from sits.understanding.tokenizers.bridge import TokenBridge
from sits.understanding.tokenizers.counter import (
    GgufTokenCounter,
    HfTokenCounter,
    TokenCounter,
    gguf_counter_available,
)
from sits.understanding.tokenizers.family_map import FamilyMapCache
from sits.understanding.tokenizers.vocabulary import (
    Vocabulary,
    load_gguf_vocabulary,
    load_tokenizer_json,
    source_digest,
)

log = logging.getLogger("sits.tokenizers")
CACHE_SUBDIR = "cache"


@dataclass(frozen=True, slots=True)
class TokenizerSource:
    family: str
    path: Path  # a tokenizer.json, its directory, or a .gguf file

    @property
    def is_gguf(self) -> bool:
        return self.path.suffix == ".gguf"

    def load_vocabulary(self) -> Vocabulary:
        if self.is_gguf:
            return load_gguf_vocabulary(self.family, self.path)
        return load_tokenizer_json(self.family, self.path)


@dataclass(frozen=True, slots=True)
class LoadReport:
    family: str
    tokens: int
    from_cache: bool
    seconds: float
    exact_counts: bool


def discover_sources(directory: Path) -> list[TokenizerSource]:
    """Tokenizer sources under `directory` (see the module docstring); none if it does not exist."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for entry in sorted(directory.iterdir()):
        if entry.name == CACHE_SUBDIR:
            continue
        if entry.is_dir():
            if (entry / "tokenizer.json").is_file():
                found.append(TokenizerSource(entry.name, entry))
            else:
                ggufs = sorted(entry.glob("*.gguf"))
                if ggufs:
                    found.append(TokenizerSource(entry.name, ggufs[0]))
        elif entry.suffix == ".gguf":
            found.append(TokenizerSource(entry.stem, entry))
    return found


class TokenizerCatalog:
    def __init__(self, cache_dir: Path) -> None:
        self._cache = FamilyMapCache(cache_dir)
        self.bridge = TokenBridge()
        self._counters: dict[str, TokenCounter] = {}

    def load(self, sources: list[TokenizerSource]) -> list[LoadReport]:
        """Load every source; a broken one is logged and skipped, never fatal for the others."""
        reports = []
        for source in sources:
            try:
                reports.append(self.load_one(source))
            except (ConfigError, OSError) as exc:
                log.warning("tokenizer %s not loaded: %s", source.family, getattr(exc, "message", exc))
        return reports

    def load_one(self, source: TokenizerSource) -> LoadReport:
        started = time.perf_counter()
        family_map, cached = self._cache.load_or_build(source.family, source_digest(source.path),
                                                       source.load_vocabulary)
        counter: TokenCounter | None = None
        if not source.is_gguf:
            counter = HfTokenCounter(source.family, source.path)
        elif gguf_counter_available():
            counter = GgufTokenCounter(source.family, source.path)
        self.bridge.add(family_map)
        if counter is not None:
            self._counters[source.family] = counter
        report = LoadReport(source.family, len(family_map), cached, time.perf_counter() - started,
                            counter is not None)
        log.info("tokenizer %s: %d tokens (%s) in %.2fs", report.family, report.tokens,
                 "cached map" if cached else "map built", report.seconds)
        return report

    @property
    def counters(self) -> Mapping[str, TokenCounter]:
        return self._counters

    def family_for(self, model: str, tokenizer_family: str | None = None) -> str | None:
        """The family a model's requests are tokenised with, if one is loaded."""
        if tokenizer_family and tokenizer_family in self.bridge:
            return tokenizer_family
        return model if model in self.bridge else None

    def counter_for(self, model: str, tokenizer_family: str | None = None) -> TokenCounter | None:
        family = self.family_for(model, tokenizer_family)
        return self._counters.get(family) if family is not None else None
