"""Turning TRL prompts and completions into plain text.

TRL hands reward functions either plain strings (standard format) or lists of
chat messages (conversational format, ``[{"role": "assistant", "content": ...}]``).
Completions decoded without ``skip_special_tokens`` may also start with the
assistant header of the chat template and end with end-of-sequence tokens;
the helpers here remove both so that rewards see only what the model wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Leading assistant headers removed from completions (one at most, after leading whitespace).
DEFAULT_ASSISTANT_HEADERS: tuple[str, ...] = (
    "<|im_start|>assistant",
    "<|start_header_id|>assistant<|end_header_id|>",
    "Assistant:",
)

# End-of-sequence (and padding) tokens allowed at the end of a completion.
DEFAULT_EOS_TOKENS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>")

Messages = Sequence[Mapping[str, Any]]
Prompt = str | Messages
Completion = str | Messages


def _messages_text(messages: Messages, role: str | None) -> str:
    if isinstance(messages, str) or not all(isinstance(m, Mapping) for m in messages):
        raise TypeError("expected a string or a list of chat messages (dicts with 'role' and 'content')")
    chosen = [m for m in messages if role is None or m.get("role") == role] or list(messages)
    return "".join(str(m.get("content") or "") for m in chosen)


def completion_text(completion: Completion, headers: Iterable[str] = DEFAULT_ASSISTANT_HEADERS) -> str:
    """The text of a completion, with one leading assistant header (and whitespace) removed."""
    text = completion if isinstance(completion, str) else _messages_text(completion, "assistant")
    stripped = text.lstrip()
    for header in headers:
        if stripped.startswith(header):
            return stripped[len(header) :].lstrip()
    return text


def prompt_text(prompt: Prompt) -> str:
    """The text of a prompt: itself if a string, else the content of its user messages."""
    return prompt if isinstance(prompt, str) else _messages_text(prompt, "user")


def strip_eos(text: str, eos_tokens: Iterable[str] = DEFAULT_EOS_TOKENS) -> str:
    """Remove trailing whitespace and any run of end-of-sequence tokens from ``text``."""
    tokens = tuple(t for t in eos_tokens if t)
    text = text.rstrip()
    while True:
        token = next((t for t in tokens if text.endswith(t)), None)
        if token is None:
            return text
        text = text[: -len(token)].rstrip()


def check_aligned(completions: Sequence[object], **columns: Sequence[object]) -> None:
    """Raise ValueError unless every column has one entry per completion."""
    for name, column in columns.items():
        if len(column) != len(completions):
            raise ValueError(f"column '{name}' has {len(column)} entries for {len(completions)} completions")
