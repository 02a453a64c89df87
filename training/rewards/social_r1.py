"""Social-R1 composite reward.

``R = R_fmt · (w_o·R_out + τ·(w_s·R_struct + w_c·R_content)·R_len)`` where

* ``R_fmt`` is 1 when the think/answer format is valid, else 0 (and R is 0);
* ``R_out`` is 1 when the answer names the labelled option, else 0;
* ``R_struct`` and ``R_content`` come from a :class:`~training.rewards.sip_judges.SIPJudge`
  applied to the reasoning (the ``<think>`` content) and the prompt text;
* ``R_len`` is :func:`length_factor` of the reasoning's token count.

On a judge failure, ``on_judge_error="raise"`` (default) raises the
:class:`~training.rewards.sip_judges.JudgeError`; ``"outcome_only"`` drops the
process term for that completion (``R = w_o·R_out``), records the error in its
:class:`SocialR1Score` and logs a warning.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sotopia_env.training.rewards._text import Completion, Prompt, check_aligned, prompt_text
from sotopia_env.training.rewards.sip_judges import (
    BatchSIPJudge,
    JudgeError,
    RuleBasedSIPJudge,
    SIPJudge,
    StageJudgement,
)
from sotopia_env.training.rewards.socialiqa import LETTERS, RewardFunc, label_letter
from sotopia_env.training.rewards.think_format import FormatConfig, answer_block, check_format, parse_choice

logger = logging.getLogger(__name__)


def whitespace_token_count(text: str) -> int:
    return len(text.split())


@dataclass(frozen=True)
class SocialR1Config:
    """Weights, length budget and policies. Pass a tokenizer's counter as ``count_tokens`` if wanted."""

    w_outcome: float = 1.0
    w_struct: float = 0.5
    w_content: float = 0.5
    tau: float = 0.5
    min_tokens: int = 32
    max_tokens: int = 512
    short_scale: float = 32.0
    long_scale: float = 256.0
    count_tokens: Callable[[str], int] = whitespace_token_count
    letters: str = LETTERS
    on_judge_error: Literal["raise", "outcome_only"] = "raise"
    format: FormatConfig = field(default_factory=FormatConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"need 0 <= min_tokens <= max_tokens, got {self.min_tokens}, {self.max_tokens}")
        if self.short_scale <= 0 or self.long_scale <= 0:
            raise ValueError("short_scale and long_scale must be positive")
        if self.on_judge_error not in ("raise", "outcome_only"):
            raise ValueError(f"on_judge_error must be 'raise' or 'outcome_only', got {self.on_judge_error!r}")


def length_factor(n_tokens: int, config: SocialR1Config) -> float:
    """1 inside [min_tokens, max_tokens]; ``exp(-(distance / scale)²)`` outside.

    Continuous (and with zero slope) at both budget edges and strictly
    decreasing with the distance from the budget; positive until float underflow.
    """
    if n_tokens < config.min_tokens:
        distance, scale = config.min_tokens - n_tokens, config.short_scale
    elif n_tokens > config.max_tokens:
        distance, scale = n_tokens - config.max_tokens, config.long_scale
    else:
        return 1.0
    return math.exp(-((distance / scale) ** 2))


@dataclass(frozen=True)
class SocialR1Score:
    """One completion's reward and its parts; judge parts are None when not computed."""

    total: float
    format_ok: bool
    outcome: float
    length: float | None = None
    struct: float | None = None
    content: float | None = None
    judge_error: str | None = None


def _judge_all(judge: SIPJudge, pairs: list[tuple[str, str]]) -> list[StageJudgement | JudgeError]:
    if isinstance(judge, BatchSIPJudge):
        return judge.judge_batch(pairs)
    results: list[StageJudgement | JudgeError] = []
    for context, reasoning in pairs:
        try:
            results.append(judge.judge(context, reasoning))
        except JudgeError as exc:
            results.append(exc)
    return results


def _compose(
    outcome: float, r_len: float, judgement: StageJudgement | JudgeError, cfg: SocialR1Config
) -> SocialR1Score:
    if isinstance(judgement, JudgeError):
        if cfg.on_judge_error == "raise":
            raise judgement
        logger.warning("SIP judge failed, scoring outcome only: %s", judgement)
        return SocialR1Score(cfg.w_outcome * outcome, True, outcome, r_len, judge_error=str(judgement))
    process = cfg.w_struct * judgement.stages_in_order + cfg.w_content * judgement.content
    total = cfg.w_outcome * outcome + cfg.tau * process * r_len
    return SocialR1Score(total, True, outcome, r_len, judgement.stages_in_order, judgement.content)


def social_r1_scores(
    prompts: Sequence[Prompt],
    completions: Sequence[Completion],
    labels: Sequence[object],
    config: SocialR1Config | None = None,
    judge: SIPJudge | None = None,
) -> list[SocialR1Score]:
    """Score a batch; the judge sees only completions with a valid format (one batch call if it can)."""
    check_aligned(completions, prompts=prompts, label=labels)
    cfg = config or SocialR1Config()
    judge = judge or RuleBasedSIPJudge()
    scores: list[SocialR1Score | None] = []
    pending: list[tuple[int, float, float]] = []
    pairs: list[tuple[str, str]] = []
    for i, (prompt, completion, label) in enumerate(zip(prompts, completions, labels, strict=True)):
        choice = parse_choice(answer_block(completion, cfg.format), cfg.letters)
        outcome = 1.0 if choice == label_letter(label, cfg.letters) else 0.0
        check = check_format(completion, cfg.format)
        if not check.valid or check.reasoning is None:
            scores.append(SocialR1Score(0.0, False, outcome))
            continue
        scores.append(None)
        pending.append((i, outcome, length_factor(cfg.count_tokens(check.reasoning), cfg)))
        pairs.append((prompt_text(prompt), check.reasoning))
    judgements = _judge_all(judge, pairs) if pairs else []
    if len(judgements) != len(pairs):
        raise JudgeError(f"judge returned {len(judgements)} judgements for {len(pairs)} completions")
    for (i, outcome, r_len), judgement in zip(pending, judgements, strict=True):
        scores[i] = _compose(outcome, r_len, judgement, cfg)
    return [s for s in scores if s is not None]


def make_social_r1_reward(config: SocialR1Config | None = None, judge: SIPJudge | None = None) -> RewardFunc:
    """A TRL reward function ``social_r1_reward(prompts, completions, *, label, **columns)``.

    The judge defaults to :class:`~training.rewards.sip_judges.RuleBasedSIPJudge`.
    """
    cfg = config or SocialR1Config()
    sip_judge = judge or RuleBasedSIPJudge()

    def social_r1_reward(
        prompts: Sequence[Prompt],
        completions: Sequence[Completion],
        *,
        label: Sequence[object],
        **columns: Any,
    ) -> list[float]:
        return [s.total for s in social_r1_scores(prompts, completions, label, cfg, sip_judge)]

    return social_r1_reward
