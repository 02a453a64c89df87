"""Near-duplicate detection for generated scenarios and characters.

The measure: the Jaccard similarity of word 3-shingles. A text is normalised (case-folded, punctuation
dropped, ``<extra_info>``-style tag names removed, whitespace collapsed) and cut into the set of its
overlapping three-word windows; two texts score ``|A ∩ B| / |A ∪ B|`` (0 = nothing shared, 1 = same
shingles). A scenario's text is its scenario description plus all its goals. A generated item whose score
against any library item or any earlier generated item is ``>= DUPLICATE_THRESHOLD`` (0.5) is a
duplicate and is rejected. Texts of fewer than three words are shingled as one shingle of what they have.
"""

from __future__ import annotations

import re

from sotopia_env.generation.seeds import normalise
from sotopia_env.profiles import Character, Scenario

DUPLICATE_THRESHOLD = 0.5
SHINGLE_WORDS = 3
_TAG = re.compile(r"</?(extra_info|strategy_hint)>")


def shingles(text: str, k: int = SHINGLE_WORDS) -> frozenset[str]:
    """The set of ``k``-word windows of the normalised text."""
    words = normalise(_TAG.sub(" ", text)).split()
    if len(words) < k:
        return frozenset([" ".join(words)]) if words else frozenset()
    return frozenset(" ".join(words[i : i + k]) for i in range(len(words) - k + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def scenario_text(scenario: Scenario) -> str:
    return " ".join([scenario.scenario, *scenario.goals])


def character_text(character: Character) -> str:
    return " ".join([character.public_info, character.secret])


class NearDuplicateIndex:
    """Shingle sets of known items; ``match`` finds the most similar one at or above the threshold."""

    def __init__(self, threshold: float = DUPLICATE_THRESHOLD) -> None:
        self.threshold = threshold
        self._items: list[tuple[str, frozenset[str]]] = []

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item_id: str, text: str) -> None:
        self._items.append((item_id, shingles(text)))

    def best(self, text: str) -> tuple[str | None, float]:
        """The id of the most similar known item and its score (``(None, 0.0)`` when the index is empty)."""
        probe = shingles(text)
        best_id, best_score = None, 0.0
        for item_id, known in self._items:
            score = jaccard(probe, known)
            if score > best_score:
                best_id, best_score = item_id, score
        return best_id, best_score

    def match(self, text: str) -> tuple[str, float] | None:
        """``(id, score)`` of the most similar item if it is a near-duplicate, else None."""
        item_id, score = self.best(text)
        if item_id is not None and score >= self.threshold:
            return item_id, score
        return None
