"""A logits processor that keeps each reply from copying runs of tokens out of texts it must not repeat.

A small model decoding greedily echoes the conversation: both sides end up saying the same sentence turn after
turn. Retrying such a reply rarely helps (the retry echoes too), so the local backend stops the copy while it
is being written: a row may not extend a run of ``n - 1`` tokens taken from an earlier text with the token that
made the run ``n`` long there. Shorter overlaps ("I think", a name) stay free, and a row whose every allowed
token would be banned is left alone rather than emptied.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, cast

import torch
from transformers import LogitsProcessor

NGRAM = 4  # a reply may share at most NGRAM - 1 consecutive tokens with any earlier text


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
            banned = table.get(tuple(tail))
            if not banned:
                continue
            index = torch.tensor(sorted(banned), device=scores.device)
            kept = scores[row].index_fill(0, index, float("-inf"))
            if torch.isfinite(kept).any():
                scores[row] = kept
        return cast(torch.FloatTensor, scores)
