"""The ``<think>…</think><answer>…</answer>`` format and the multiple-choice answer parser.

A completion has a valid format when, after removing one leading assistant
header (see :mod:`training.rewards._text`):

* each of ``<think>``, ``</think>``, ``<answer>``, ``</answer>`` occurs exactly once,
  in that order;
* only whitespace comes before ``<think>`` (with ``think_prefilled`` the chat
  template already wrote ``<think>``, so the completion may omit it);
* only whitespace comes between ``</think>`` and ``<answer>``;
* only whitespace and end-of-sequence tokens (any number of them, e.g. padding)
  come after ``</answer>``.

The reasoning and the answer block may be empty; an empty answer block is an
answer problem, not a format problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sotopia_env.training.rewards._text import (
    DEFAULT_ASSISTANT_HEADERS,
    DEFAULT_EOS_TOKENS,
    Completion,
    completion_text,
)

TAGS = ("<think>", "</think>", "<answer>", "</answer>")


@dataclass(frozen=True)
class FormatConfig:
    """How completions are normalised before the format check."""

    eos_tokens: tuple[str, ...] = DEFAULT_EOS_TOKENS
    assistant_headers: tuple[str, ...] = DEFAULT_ASSISTANT_HEADERS
    think_prefilled: bool = False


@dataclass(frozen=True)
class FormatCheck:
    """Result of :func:`check_format`: ``error`` is None exactly when the format is valid."""

    error: str | None
    reasoning: str | None = None
    answer: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None


def _only_eos(text: str, eos_tokens: tuple[str, ...]) -> bool:
    for token in sorted((t for t in eos_tokens if t), key=len, reverse=True):
        text = text.replace(token, "")
    return not text.strip()


def normalise(completion: Completion, config: FormatConfig) -> str:
    """Completion text with the header removed and ``<think>`` restored when prefilled."""
    text = completion_text(completion, config.assistant_headers)
    if config.think_prefilled and not text.lstrip().startswith("<think>"):
        text = "<think>" + text
    return text


def check_format(completion: Completion, config: FormatConfig | None = None) -> FormatCheck:
    """Check the think/answer format; on success return the reasoning and the answer block."""
    config = config or FormatConfig()
    text = normalise(completion, config)
    for tag in TAGS:
        count = text.count(tag)
        if count != 1:
            return FormatCheck(f"{'missing' if count == 0 else 'duplicate'} {tag}")
    open_think, close_think, open_answer, close_answer = (text.index(tag) for tag in TAGS)
    if not open_think < close_think < open_answer < close_answer:
        return FormatCheck("tags out of order")
    if text[:open_think].strip():
        return FormatCheck("text before <think>")
    if text[close_think + len("</think>") : open_answer].strip():
        return FormatCheck("text between </think> and <answer>")
    if not _only_eos(text[close_answer + len("</answer>") :], config.eos_tokens):
        return FormatCheck("text after </answer>")
    reasoning = text[open_think + len("<think>") : close_think]
    answer = text[open_answer + len("<answer>") : close_answer]
    return FormatCheck(None, reasoning.strip(), answer.strip())


_ANSWER_BLOCK = re.compile(r"<answer>((?:(?!<answer>).)*?)</answer>", re.DOTALL)


def answer_block(completion: Completion, config: FormatConfig | None = None) -> str | None:
    """The content of the last complete ``<answer>…</answer>`` block, format valid or not."""
    blocks = _ANSWER_BLOCK.findall(normalise(completion, config or FormatConfig()))
    return blocks[-1].strip() if blocks else None


def parse_choice(block: str | None, letters: str = "ABC") -> str | None:
    """The option letter named in an answer block, or None when missing or invalid.

    The block names option X when it contains ``(X)`` for exactly one letter X
    (any text around it is ignored, so ``(B) So Robin can eat`` and
    ``The answer is (B)`` both give ``B``), or when the whole block is the bare
    letter, optionally followed by a full stop (``B`` or ``B.``). Letters are
    upper case only. Two different bracketed letters make the block ambiguous (None).
    """
    if not block:
        return None
    found: set[str] = set(re.findall(rf"\(([{re.escape(letters)}])\)", block))
    if len(found) == 1:
        return found.pop()
    if found:
        return None
    bare = block.strip().removesuffix(".")
    return bare if len(bare) == 1 and bare in letters else None
