"""The built-in RL tasks, on the rewards of ``training.rewards``.

- ``socialiqa``: Social IQa JSONL items (``context``, ``question``, ``answerA..C``, ``label``), asked in the
  think/answer format; rewards: the DeepEnlighten format (+1/-1) and answer (+2/-2/-3) rewards.
- ``social_r1``: the same items and prompts; reward: the Social-R1 composite with the rule-based SIP judge.
  A completion whose reasoning the judge cannot rate scores ``None`` (not its outcome alone, not 0).
- ``item_selection``: sim-posttrain item-selection rows (``prompt``, ``candidates``, ``answer_index``, 0-based);
  the candidates are listed with letters; reward: 1 when the strict parser reads the right candidate, else 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sotopia_env.jsonl import json_lines
from sotopia_env.training.rewards.social_r1 import SocialR1Config, social_r1_scores
from sotopia_env.training.rewards.socialiqa import build_prompt, load_socialiqa, make_socialiqa_rewards
from sotopia_env.training.rewards.user_sim import LABELS, item_selection_reward
from sotopia_env.training.rl.registry import RLTask, TaskError, register_task
from sotopia_env.validation import field_problem


def _require(data: str | None, task: str) -> str:
    if not data:
        raise TaskError(f"task {task!r} needs a data file (set 'data')")
    return data


def _socialiqa_dataset(data: str | None, max_items: int | None, task: str):
    from datasets import Dataset

    try:
        items = load_socialiqa(_require(data, task))
    except (ValueError, OSError) as exc:
        raise TaskError(str(exc)) from None
    items = items[:max_items] if max_items else items
    return Dataset.from_list([{"prompt": build_prompt(item), "label": item.label} for item in items])


@register_task("socialiqa")
def socialiqa_task(data: str | None, max_items: int | None) -> RLTask:
    rewards = make_socialiqa_rewards()
    return RLTask("socialiqa", _socialiqa_dataset(data, max_items, "socialiqa"), [rewards.format, rewards.answer])


def make_social_r1_task_reward(config: SocialR1Config | None = None, judge: Any = None):
    """The Social-R1 composite as a TRL reward; a completion the judge could not rate is ``None``."""
    cfg = config or SocialR1Config(on_judge_error="outcome_only")

    def social_r1_reward(
        prompts: Sequence[Any], completions: Sequence[Any], *, label: Sequence[object], **columns: Any
    ) -> list[float | None]:
        scores = social_r1_scores(prompts, completions, label, cfg, judge)
        return [None if s.judge_error else s.total for s in scores]

    return social_r1_reward


@register_task("social_r1")
def social_r1_task(data: str | None, max_items: int | None) -> RLTask:
    return RLTask("social_r1", _socialiqa_dataset(data, max_items, "social_r1"), [make_social_r1_task_reward()])


class ItemSelectionRow(BaseModel):
    """One item-selection question: the user's context, the candidate items, the bought one (0-based)."""

    model_config = ConfigDict(extra="ignore")

    prompt: str = Field(min_length=1)
    candidates: list[str] = Field(min_length=1, max_length=len(LABELS))
    answer_index: int = Field(ge=0)

    @model_validator(mode="after")
    def _answer_in_range(self) -> ItemSelectionRow:
        if self.answer_index >= len(self.candidates):
            raise ValueError(f"answer_index {self.answer_index} is out of range for {len(self.candidates)} candidates")
        return self

    def messages(self) -> list[dict[str, str]]:
        options = "\n".join(f"({LABELS[i]}) {text}" for i, text in enumerate(self.candidates))
        content = f"{self.prompt}\n\nCandidates:\n{options}\n\nAnswer with the letter of the one item only."
        return [{"role": "user", "content": content}]


def load_item_selection(path: str) -> list[ItemSelectionRow]:
    """Read item-selection JSONL; a bad line raises ``TaskError`` naming file:line."""
    rows = []
    for where, row in json_lines(path, TaskError):
        try:
            rows.append(ItemSelectionRow.model_validate(row))
        except ValidationError as exc:
            raise TaskError(f"{where}: {field_problem(exc, '(line)')}") from None
    return rows


@register_task("item_selection")
def item_selection_task(data: str | None, max_items: int | None) -> RLTask:
    from datasets import Dataset

    rows = load_item_selection(_require(data, "item_selection"))
    rows = rows[:max_items] if max_items else rows
    records = [{"prompt": r.messages(), "candidates": r.candidates, "answer_index": r.answer_index} for r in rows]
    return RLTask("item_selection", Dataset.from_list(records), [item_selection_reward])
