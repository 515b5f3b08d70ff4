"""The classifier cascade: a cheap head decides when it is sure, an accurate one when it is not.

After the rules stage, every prompt is embedded by the fast embedder (char n-grams: about
0.1 ms) and labelled by its head. Only when that head's margin (top probability minus the
runner-up's) is below `min_margin` is the prompt embedded again by the accurate embedder
(e5: 15-50 ms on this CPU) and labelled by its head. The threshold was chosen by
cross-validation on training data (docs/understanding.md), so most prompts never pay for
the accurate model.

Both stages run on their own micro-batcher (one worker thread each) and share the request's
classify deadline: if the fast stage misses it the caller falls back to the rules, and if the
escalation misses it (or fails) the fast stage's answer stands, which beats the rules fallback.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from sits.understanding.embedders import Embedder
from sits.understanding.embedding_cache import cached_embed
from sits.understanding.intent_classifier import IntentClassifier
from sits.understanding.micro_batcher import MicroBatcher
from sits.understanding.rules_stage import IntentGuess

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CascadeStages:
    """The cascade's offline parts: two classifiers with their embedders and the escalation bar."""

    fast: IntentClassifier
    fast_embedder: Embedder
    accurate: IntentClassifier
    accurate_embedder: Embedder
    min_margin: float

    def source(self, escalated: bool) -> str:
        """The `intent_source` of a cascade guess: which embedder decided, e.g. "embedding:e5"."""
        return f"embedding:{(self.accurate if escalated else self.fast).embedder_name}"

    def decide_fast(self, vectors: np.ndarray) -> list[tuple[IntentGuess, bool]]:
        """The fast head's guesses, each with whether it must be escalated (margin below the bar)."""
        return [(replace(g, source=self.source(False)), margin < self.min_margin)
                for g, margin in self.fast.classify_with_margins(vectors)]

    def decide_accurate(self, vectors: np.ndarray) -> list[IntentGuess]:
        return [replace(g, source=self.source(True)) for g in self.accurate.classify_vectors(vectors)]

    def classify_offline(self, texts: Sequence[str], cache_dir: Path | None = None) -> list[IntentGuess]:
        """Both stages over many texts at once, no deadline (CLI, evaluations); disk-cached embeddings."""
        decided = self.decide_fast(cached_embed(self.fast_embedder, texts, cache_dir))
        guesses = [g for g, _ in decided]
        todo = [i for i, (_, escalate) in enumerate(decided) if escalate]
        if todo:
            vectors = cached_embed(self.accurate_embedder, [texts[i] for i in todo], cache_dir)
            for i, g in zip(todo, self.decide_accurate(vectors)):
                guesses[i] = g
        return guesses


class VectorLru:
    """The accurate stage's vectors of recently seen prompts, keyed by a digest of the text.

    Repeated prompts (retries, templated or scripted traffic) then skip the slow model.
    Bounded in entries; a digest as key keeps long prompts out of memory.
    """

    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._rows: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self.hits = 0

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()

    def get(self, text: str) -> np.ndarray | None:
        if self._max <= 0:
            return None
        key = self._key(text)
        row = self._rows.get(key)
        if row is not None:
            self._rows.move_to_end(key)
            self.hits += 1
        return row

    def put(self, text: str, row: np.ndarray) -> None:
        if self._max <= 0:
            return
        key = self._key(text)
        self._rows[key] = row
        self._rows.move_to_end(key)
        while len(self._rows) > self._max:
            self._rows.popitem(last=False)


class IntentCascade:
    """The request-time cascade: each stage behind its own micro-batcher, one deadline for both."""

    def __init__(self, stages: CascadeStages, fast_batcher: MicroBatcher, accurate_batcher: MicroBatcher,
                 cache_entries: int = 0) -> None:
        self.stages = stages
        self._fast = fast_batcher
        self._accurate = accurate_batcher
        self._cache = VectorLru(cache_entries)
        self.classified = 0  # prompts the fast stage labelled; with `escalations`, the escalation share
        self.escalations = 0
        self.escalation_timeouts = 0  # escalations that missed the deadline or failed: the fast answer stood

    @property
    def cache_hits(self) -> int:
        return self._cache.hits

    async def start(self) -> None:
        await self._fast.start()
        await self._accurate.start()

    async def aclose(self) -> None:
        await self._fast.aclose()
        await self._accurate.aclose()

    async def classify(self, prompt: str, timeout_s: float | None) -> IntentGuess:
        """Raises TimeoutError (or the model's error) only when the fast stage cannot answer;
        the caller then falls back to the rules stage."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        vector = await asyncio.wait_for(self._fast.embed(prompt), timeout_s)
        (guess, escalate), = self.stages.decide_fast(vector[None, :])
        self.classified += 1
        if not escalate:
            return guess
        self.escalations += 1
        row = self._cache.get(prompt)
        if row is None:
            left = None if timeout_s is None else timeout_s - (loop.time() - started)
            try:
                if left is not None and left <= 0:
                    raise TimeoutError
                row = await asyncio.wait_for(self._accurate.embed(prompt), left)
            except TimeoutError:
                self.escalation_timeouts += 1
                return guess
            except Exception:  # a broken accurate model leaves the fast answer standing
                log.exception("accurate intent classifier failed; keeping the fast stage's answer")
                self.escalation_timeouts += 1
                return guess
            self._cache.put(prompt, row)
        return self.stages.decide_accurate(row[None, :])[0]
