"""A logits processor that keeps each reply from copying runs of tokens out of texts it must not repeat.

A small model decoding greedily echoes the conversation: both sides end up saying the same sentence turn after
turn. Retrying such a reply rarely helps (the retry echoes too), so the local backend stops the copy while it
is being written: a row may not extend a run of ``n - 1`` tokens taken from an earlier text with the token that
made the run ``n`` long there. Shorter overlaps ("I think", a name) stay free, and a row whose every allowed
token would be banned is left alone rather than emptied.

Near-copies slip through: with every verbatim run banned, the 135M model opened all 20 turns of an episode with
"I am not ..." ("I am not clear about the conversation.", "I am not unclear about ..."). ``NoRepeatedOpening``
keeps a reply's ``argument`` from opening with the first ``OPENING_WORDS`` words that opened one of the same
texts: the token that would complete such an opening (at a word boundary) is banned, and the model picks
another start. Three words were not enough: "I'm not sure ...", "I'm not really ...", "I'm not able ..." chains
filled whole episodes (``benchmarks/README.md`` section 8), so two.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import defaultdict
from typing import Any, cast

import torch
from transformers import LogitsProcessor

NGRAM = 4  # a reply may share at most NGRAM - 1 consecutive tokens with any earlier text
OPENING_WORDS = 2  # a reply's argument may not open with the first two words of an earlier text
_ARGUMENT_OPENS = re.compile(r'"argument"\s*:\s*"')


def ngram_table(token_lists: list[list[int]], n: int = NGRAM) -> dict[tuple[int, ...], set[int]]:
    """For every run of ``n - 1`` tokens in ``token_lists``, the tokens that follow it there."""
    table: dict[tuple[int, ...], set[int]] = defaultdict(set)
    for tokens in token_lists:
        for k in range(len(tokens) - n + 1):
            table[tuple(tokens[k : k + n - 1])].add(tokens[k + n - 1])
    return dict(table)


def banned_tables(tokenizer: Any, texts_per_row: list[tuple[str, ...]], n: int = NGRAM) -> list[dict]:
    """One table per row. Texts are tokenized as they appear inside a JSON string (the reply's form)."""
    tables = []
    for texts in texts_per_row:
        encoded = [json.dumps(t, ensure_ascii=False)[1:-1] for t in texts if t.strip()]
        ids = tokenizer(encoded, add_special_tokens=False)["input_ids"] if encoded else []
        tables.append(ngram_table(ids, n))
    return tables


def ban(scores: torch.Tensor, row: int, tokens: set[int]) -> None:
    """Make ``tokens`` impossible in ``row`` of ``scores``, unless that would leave the row no token at all."""
    if not tokens:
        return
    kept = scores[row].index_fill(0, torch.tensor(sorted(tokens), device=scores.device), float("-inf"))
    if torch.isfinite(kept).any():
        scores[row] = kept


class NoCopy(LogitsProcessor):
    """Bans, per row, the tokens that would complete an ``n``-token run copied from that row's table."""

    def __init__(self, tables: list[dict[tuple[int, ...], set[int]]], prompt_len: int, n: int = NGRAM) -> None:
        self.tables = tables
        self.prompt_len = prompt_len
        self.n = n

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] - self.prompt_len < self.n - 1:
            return scores
        tails = input_ids[:, input_ids.shape[1] - (self.n - 1) :].tolist()
        for row, (table, tail) in enumerate(zip(self.tables, tails, strict=True)):
            ban(scores, row, table.get(tuple(tail), set()))
        return cast(torch.FloatTensor, scores)


def openings(texts: tuple[str, ...], words: int = OPENING_WORDS) -> list[str]:
    """The first ``words`` words of each text that has that many, as a JSON string writes them."""
    found = {" ".join(t.split()[:words]) for t in texts if len(t.split()) >= words}
    return sorted(json.dumps(o, ensure_ascii=False)[1:-1] for o in found)


class TokenTexts:
    """Every token's text (as decoding writes it), sorted, to find the tokens that start with a given text."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        pieces = sorted((tokenizer.decode([i]), i) for i in range(min(vocab_size, len(tokenizer))))
        self.texts = [text for text, _ in pieces]
        self.ids = [i for _, i in pieces]

    def completing(self, rest: str) -> list[int]:
        """Tokens whose text starts with ``rest`` and ends there or at a word's end (so "not" completes "I am
        not", while "nothing" does not)."""
        found = []
        k = bisect.bisect_left(self.texts, rest)
        while k < len(self.texts) and self.texts[k].startswith(rest):
            after = self.texts[k][len(rest) : len(rest) + 1]
            if not after or not (after.isalnum() or after in "'_-"):
                found.append(self.ids[k])
            k += 1
        return found


class NoRepeatedOpening(LogitsProcessor):
    """Bans, per row, the token that would make the reply's ``argument`` open with one of that row's
    ``openings``. Rows whose reply has not reached its argument yet (or never writes one) are untouched."""

    def __init__(self, openings_per_row: list[list[str]], tokens: TokenTexts, tokenizer: Any, prompt_len: int) -> None:
        self.openings = openings_per_row
        self.tokens = tokens
        self.tokenizer = tokenizer
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        for row, openings in enumerate(self.openings):
            if not openings:
                continue
            reply = self.tokenizer.decode(input_ids[row, self.prompt_len :].tolist())
            found = _ARGUMENT_OPENS.search(reply)
            if found is None:
                continue
            argument = reply[found.end() :]
            banned = {
                token
                for opening in openings
                if len(argument) < len(opening) and opening.startswith(argument)
                for token in self.tokens.completing(opening[len(argument) :])
            }
            ban(scores, row, banned)
        return cast(torch.FloatTensor, scores)
