"""A logits processor that nudges each reply toward its seat's topic words (``sotopia_env.topic``).

Greedy decoding on the embedded SmolLM2-135M holds a scenario's topic for a few turns, then drifts into chains of
politeness and self-talk ("I'm not sure what you mean.", "You have amazing skills and talents."): 28% of ``run``'s
20 speech turns shared a word with the scenario or the speaker's goal under the ``chat`` prompt, 84% with this
nudge, and no prompt tried did better than 55% (``benchmarks/README.md`` section 8). ``TopicBias`` adds ``bias``
logits to the tokens that start one of the row's words as a word (" cabin", " Cabin"), wherever the grammar allows
them: the model still chooses, but a topic word within ``bias`` of its first choice wins. Other backends ignore
the request's ``favour_words``.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from transformers import LogitsProcessor


def favoured_tokens(tokenizer: Any, words: tuple[str, ...]) -> list[int]:
    """The first token of each word written as a word start, lower case and capitalised."""
    forms = [f" {form}" for word in words for form in (word, word.capitalize())]
    ids = tokenizer(forms, add_special_tokens=False)["input_ids"] if forms else []
    return sorted({tokens[0] for tokens in ids if tokens})


class TopicBias(LogitsProcessor):
    """Adds ``bias`` to each row's favoured tokens (a row with none is untouched)."""

    def __init__(self, tokens_per_row: list[list[int]], biases: list[float]) -> None:
        self.tokens_per_row = tokens_per_row
        self.biases = biases

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        for row, (tokens, bias) in enumerate(zip(self.tokens_per_row, self.biases, strict=True)):
            if tokens and bias:
                scores[row, tokens] += bias
        return cast(torch.FloatTensor, scores)
