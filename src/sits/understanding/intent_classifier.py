"""Intent classifier: domains' examples embedded once, a linear head over them.

The head is a multinomial logistic regression fitted on the examples' embeddings
(plus each description as one more example). Building it is offline work done at
startup; classifying one vector is a matrix-vector product.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sits.understanding.domains import Domain
from sits.understanding.embedders import Embedder
from sits.understanding.embedding_cache import cached_embed
from sits.understanding.linear_head import LinearHead, fit_linear_head
from sits.understanding.rules_stage import IntentGuess

# Found by measurement on the intents train split (docs/understanding.md): unit-norm
# embeddings need a sharp temperature for the softmax to separate close domains.
DEFAULT_TEMPERATURE = 0.1


@dataclass(frozen=True)
class IntentClassifier:
    head: LinearHead
    embedder_name: str

    @property
    def labels(self) -> tuple[str, ...]:
        return self.head.labels

    def classify_vectors(self, vectors: np.ndarray) -> list[IntentGuess]:
        probs = self.head.probabilities(np.atleast_2d(vectors))
        best = probs.argmax(axis=1)
        return [IntentGuess(self.head.labels[i], float(probs[r, i]), "embedding") for r, i in enumerate(best)]

    def classify_with_margins(self, vectors: np.ndarray) -> list[tuple[IntentGuess, float]]:
        """Each guess with its margin: top probability minus the runner-up's (how sure the head is)."""
        probs = self.head.probabilities(np.atleast_2d(vectors))
        top2 = np.sort(probs, axis=1)[:, -2:]
        best = probs.argmax(axis=1)
        return [(IntentGuess(self.head.labels[i], float(probs[r, i]), "embedding"), float(top2[r, 1] - top2[r, 0]))
                for r, i in enumerate(best)]


def build_intent_classifier(
    domains: Sequence[Domain], embedder: Embedder, cache_dir: Path | None = None,
    temperature: float = DEFAULT_TEMPERATURE,
) -> IntentClassifier:
    texts: list[str] = []
    labels: list[str] = []
    for d in domains:
        for text in (*d.examples, *((d.description,) if d.description else ())):
            texts.append(text)
            labels.append(d.name)
    if len(set(labels)) < 2:
        raise ValueError("the intent classifier needs at least two domains with examples")
    vectors = cached_embed(embedder, texts, cache_dir)
    return IntentClassifier(fit_linear_head(vectors, labels, temperature=temperature), embedder.name)
