"""Social IQa (Sap et al., 2019): loading, prompting and DeepEnlighten-style rewards.

Rewards follow DeepEnlighten's defaults: a format reward of +1 (valid) or -1
(invalid, see :mod:`training.rewards.think_format`) and an answer reward of +2
(correct), -2 (wrong) or -3 (no complete ``<answer>`` block, or one that names
no single option). The answer is read from the last complete answer block
whether or not the format is valid; the format reward penalises the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sotopia_env.jsonl import json_lines
from sotopia_env.training.rewards._text import Completion, check_aligned
from sotopia_env.training.rewards.think_format import FormatConfig, answer_block, check_format, parse_choice
from sotopia_env.validation import field_problem

LETTERS = "ABC"

RewardFunc = Callable[..., list[float]]


class SocialIQaItem(BaseModel):
    """One Social IQa question in the original JSONL form; extra fields are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    context: str = Field(min_length=1)
    question: str = Field(min_length=1)
    # camelCase as in the dataset
    answerA: str = Field(min_length=1)
    answerB: str = Field(min_length=1)
    answerC: str = Field(min_length=1)
    label: Literal["1", "2", "3"]

    @property
    def options(self) -> tuple[str, str, str]:
        return (self.answerA, self.answerB, self.answerC)

    @property
    def answer_letter(self) -> str:
        return LETTERS[int(self.label) - 1]


def load_socialiqa(path: str | Path) -> list[SocialIQaItem]:
    """Read Social IQa JSONL; blank lines are skipped, bad lines raise a one-line ValueError naming file:line."""
    items = []
    for where, row in json_lines(path, objects=False):
        try:
            items.append(SocialIQaItem.model_validate(row))
        except ValidationError as exc:
            raise ValueError(f"{where}: {field_problem(exc, '(line)')}") from None
    return items


INSTRUCTION = (
    "Think the question through inside <think></think>, then give your final choice inside "
    "<answer></answer> as the option letter in parentheses followed by the option text. "
    "Reply in exactly this form and write nothing outside the tags:\n"
    "<think>your reasoning</think><answer>(X) option text</answer>"
)


def build_prompt(item: SocialIQaItem) -> list[dict[str, str]]:
    """Chat messages (one user turn) asking the question in the think/answer format."""
    options = "\n".join(f"({letter}) {text}" for letter, text in zip(LETTERS, item.options, strict=True))
    content = f"{item.context}\nQuestion: {item.question}\n{options}\n\n{INSTRUCTION}"
    return [{"role": "user", "content": content}]


def label_letter(label: object, letters: str = LETTERS) -> str:
    """The option letter of a label given as "1".."n", 1..n or a letter; ValueError otherwise."""
    text = str(label) if isinstance(label, int) and not isinstance(label, bool) else label
    if isinstance(text, str):
        if len(text) == 1 and text in letters:
            return text
        if text.isascii() and text.isdigit() and 1 <= int(text) <= len(letters):
            return letters[int(text) - 1]
    raise ValueError(f"invalid answer label {label!r}: expected 1..{len(letters)} or {letters[0]}..{letters[-1]}")


@dataclass(frozen=True)
class SocialIQaRewardConfig:
    """Reward values (DeepEnlighten defaults) and completion normalisation."""

    format_valid: float = 1.0
    format_invalid: float = -1.0
    answer_correct: float = 2.0
    answer_wrong: float = -2.0
    answer_missing: float = -3.0
    format: FormatConfig = field(default_factory=FormatConfig)


def format_score(completion: Completion, config: SocialIQaRewardConfig) -> float:
    return config.format_valid if check_format(completion, config.format).valid else config.format_invalid


def answer_score(completion: Completion, label: object, config: SocialIQaRewardConfig) -> float:
    choice = parse_choice(answer_block(completion, config.format), LETTERS)
    if choice is None:
        return config.answer_missing
    return config.answer_correct if choice == label_letter(label) else config.answer_wrong


class SocialIQaRewards(NamedTuple):
    """TRL reward functions ``(prompts, completions, *, label, **columns) -> list[float]``."""

    format: RewardFunc
    answer: RewardFunc
    total: RewardFunc


def make_socialiqa_rewards(config: SocialIQaRewardConfig | None = None) -> SocialIQaRewards:
    """Build the format, answer and summed reward functions for one configuration."""
    cfg = config or SocialIQaRewardConfig()

    def socialiqa_format_reward(
        prompts: Sequence[Any], completions: Sequence[Completion], **columns: Any
    ) -> list[float]:
        return [format_score(c, cfg) for c in completions]

    def socialiqa_answer_reward(
        prompts: Sequence[Any], completions: Sequence[Completion], *, label: Sequence[object], **columns: Any
    ) -> list[float]:
        check_aligned(completions, label=label)
        return [answer_score(c, lab, cfg) for c, lab in zip(completions, label, strict=True)]

    def socialiqa_reward(
        prompts: Sequence[Any], completions: Sequence[Completion], *, label: Sequence[object], **columns: Any
    ) -> list[float]:
        answers = socialiqa_answer_reward(prompts, completions, label=label)
        return [f + a for f, a in zip(socialiqa_format_reward(prompts, completions), answers, strict=True)]

    return SocialIQaRewards(socialiqa_format_reward, socialiqa_answer_reward, socialiqa_reward)


socialiqa_format_reward, socialiqa_answer_reward, socialiqa_reward = make_socialiqa_rewards()
