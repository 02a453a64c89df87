"""What a seat's talk is about: the content words of its scenario and own goal.

A content word has ``CONTENT_LETTERS`` letters or more and is not one of the ``stop-words`` package's English stop
words. The chat settings nudge the local model toward a seat's content words (``backends/topic_bias.py``), and
``benchmarks/episode_quality.py`` counts a speech turn as on topic when it shares one with them: the two use the
same words, so the measure reads the nudge's target, and the transcripts are what shows whether turns talk about
the scenario.
"""

from __future__ import annotations

import re
from functools import cache

from sotopia_env.observation import Observation
from sotopia_env.prompt import seat_brief

CONTENT_LETTERS = 4
TOPIC_BIAS = 2.0  # the chat settings' nudge, in logits (backends/topic_bias.py; benchmarks/README.md section 8)
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")


@cache
def stop_words() -> frozenset[str]:
    from stop_words import get_stop_words

    return frozenset(get_stop_words("en"))


def content_words(text: str) -> set[str]:
    """The words of ``text`` (lower case, without a possessive ``'s``) of ``CONTENT_LETTERS`` letters or more
    that are not stop words."""
    found = {w.removesuffix("'s") for w in _WORD.findall(text.lower())}
    return {w for w in found if len(w) >= CONTENT_LETTERS and w not in stop_words()}


def seat_topic_words(observation: Observation) -> tuple[str, ...]:
    """The content words of the seat's scenario, its own goal and the scenario's topic, sorted. Never the others'
    goals: a seat's background holds only its own."""
    brief = seat_brief(observation.background)
    return tuple(sorted(content_words(f"{brief['scenario']} {brief['goal']} {observation.topic}")))
