"""User-simulation tasks: strict item selection and response distributions.

Item selection
    The model sees up to 26 candidate items (20 in the task) and must name the one the
    user bought. After removing one leading assistant header, surrounding
    whitespace and trailing end-of-sequence tokens, the output names candidate
    ``i`` (0-based) in exactly one of three forms:

    * the candidate text verbatim (case-sensitive; the candidate's own surrounding
      whitespace is ignored);
    * its upper-case letter label, bare or in parentheses: ``C`` or ``(C)``
      (``A`` is the first candidate);
    * its 1-based number without leading zeros or decoration: ``3``.

    Anything else names nothing: lower-case letters, ``C.``, ``Option C``,
    ``03``, out-of-range numbers or letters, partial or extended candidate text.
    If the output names several candidates (a candidate's text looks like
    another's letter or number, or texts repeat), it is ambiguous and names nothing.

Response distribution
    Records of ``(condition, item_id, source, answer)`` with ``source`` "model"
    or "human" and a numeric answer (e.g. a Likert rating). Per condition, the
    report gives the Wasserstein distance between all model and all human
    answers. Per item, accuracy is the share of the model's answers equal to a
    human modal answer (with tied modes, any of them counts); a condition's
    accuracy is the mean over its items that have both model and human answers.
"""

from __future__ import annotations

import re
import string
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sotopia_env.training.rewards._text import (
    DEFAULT_ASSISTANT_HEADERS,
    DEFAULT_EOS_TOKENS,
    Completion,
    check_aligned,
    completion_text,
    strip_eos,
)
from sotopia_env.validation import field_problem

LABELS = string.ascii_uppercase


def _named_indices(text: str, candidates: Sequence[str]) -> set[int]:
    if not text:
        return set()
    named = {i for i, candidate in enumerate(candidates) if text == candidate.strip()}
    if letter := re.fullmatch(r"([A-Z])|\(([A-Z])\)", text):
        named.add(LABELS.index(letter.group(1) or letter.group(2)))
    if re.fullmatch(r"[1-9][0-9]*", text):
        named.add(int(text) - 1)
    return {i for i in named if i < len(candidates)}


def parse_item_choice(
    completion: Completion,
    candidates: Sequence[str],
    eos_tokens: Iterable[str] = DEFAULT_EOS_TOKENS,
    headers: Iterable[str] = DEFAULT_ASSISTANT_HEADERS,
) -> int | None:
    """The 0-based index of the one candidate the completion names, or None (see module doc)."""
    if not 0 < len(candidates) <= len(LABELS):
        raise ValueError(f"need 1..{len(LABELS)} candidates, got {len(candidates)}")
    text = strip_eos(completion_text(completion, headers), eos_tokens).strip()
    named = _named_indices(text, candidates)
    return named.pop() if len(named) == 1 else None


def item_selection_reward(
    prompts: Sequence[Any],
    completions: Sequence[Completion],
    candidates: Sequence[Sequence[str]],
    answer_index: Sequence[int],
    **columns: Any,
) -> list[float]:
    """TRL reward: 1.0 iff the completion names ``candidates[answer_index]`` (0-based), else 0.0."""
    check_aligned(completions, candidates=candidates, answer_index=answer_index)
    rewards = []
    for completion, options, answer in zip(completions, candidates, answer_index, strict=True):
        if not 0 <= answer < len(options):
            raise ValueError(f"answer_index {answer} out of range for {len(options)} candidates")
        rewards.append(1.0 if parse_item_choice(completion, options) == answer else 0.0)
    return rewards


class ResponseRecord(BaseModel):
    """One answer to one item of a study, by the model or by a human participant."""

    model_config = ConfigDict(frozen=True)

    condition: str
    item_id: str
    source: Literal["model", "human"]
    answer: float


@dataclass(frozen=True)
class ItemReport:
    item_id: str
    human_modes: tuple[float, ...]
    n_model: int
    n_human: int
    accuracy: float


@dataclass(frozen=True)
class ConditionReport:
    """Wasserstein distance is None when either side has no answers; accuracy None without matched items."""

    condition: str
    n_model: int
    n_human: int
    wasserstein: float | None
    accuracy: float | None
    items: tuple[ItemReport, ...]
    unmatched_items: tuple[str, ...]


def _records(records: Iterable[ResponseRecord | Mapping[str, Any]]) -> list[ResponseRecord]:
    parsed = []
    for index, record in enumerate(records):
        try:
            parsed.append(record if isinstance(record, ResponseRecord) else ResponseRecord.model_validate(record))
        except ValidationError as exc:
            raise ValueError(f"record {index}: {field_problem(exc, '(record)')}") from None
    return parsed


def _item_report(item_id: str, model: list[float], human: list[float]) -> ItemReport:
    counts = Counter(human)
    top = max(counts.values())
    modes = tuple(sorted(answer for answer, count in counts.items() if count == top))
    accuracy = sum(answer in modes for answer in model) / len(model)
    return ItemReport(item_id, modes, len(model), len(human), accuracy)


def _condition_report(condition: str, answers: Mapping[str, Mapping[str, list[float]]]) -> ConditionReport:
    from scipy.stats import wasserstein_distance  # lazy: scipy.stats takes ~0.5 s to import

    model = [a for item in answers.values() for a in item["model"]]
    human = [a for item in answers.values() for a in item["human"]]
    matched = {i: a for i, a in answers.items() if a["model"] and a["human"]}
    items = tuple(_item_report(i, a["model"], a["human"]) for i, a in sorted(matched.items()))
    return ConditionReport(
        condition=condition,
        n_model=len(model),
        n_human=len(human),
        wasserstein=float(wasserstein_distance(model, human)) if model and human else None,
        accuracy=sum(i.accuracy for i in items) / len(items) if items else None,
        items=items,
        unmatched_items=tuple(sorted(set(answers) - set(matched))),
    )


def response_distribution(
    records: Iterable[ResponseRecord | Mapping[str, Any]],
) -> dict[str, ConditionReport]:
    """Per-condition comparison of model and human answers, keyed and ordered by condition."""
    grouped: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: {"model": [], "human": []})
    )
    for record in _records(records):
        grouped[record.condition][record.item_id][record.source].append(record.answer)
    return {condition: _condition_report(condition, grouped[condition]) for condition in sorted(grouped)}
