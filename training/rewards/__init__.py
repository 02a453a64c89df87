"""Reward functions for RL fine-tuning, in TRL's ``(prompts, completions, **columns) -> list[float]`` form.

These score text completions (Social IQa, Social-R1, item selection). A rated episode becomes a reward in one
place, ``sotopia_env.rewards`` (the env's last step and episode GRPO).

Importing this package loads only numpy/scipy/pydantic/json-repair: no torch,
no transformers, no model backend (the LLM judge imports its backend lazily).
"""

from sotopia_env.training.rewards.sip_judges import (
    STAGES,
    BatchSIPJudge,
    JudgeError,
    LLMSIPJudge,
    RuleBasedSIPJudge,
    SIPJudge,
    StageJudgement,
)
from sotopia_env.training.rewards.social_r1 import (
    SocialR1Config,
    SocialR1Score,
    length_factor,
    make_social_r1_reward,
    social_r1_scores,
)
from sotopia_env.training.rewards.socialiqa import (
    SocialIQaItem,
    SocialIQaRewardConfig,
    SocialIQaRewards,
    build_prompt,
    load_socialiqa,
    make_socialiqa_rewards,
    socialiqa_answer_reward,
    socialiqa_format_reward,
    socialiqa_reward,
)
from sotopia_env.training.rewards.socialiqa_eval import evaluate_socialiqa, wilson_interval
from sotopia_env.training.rewards.think_format import FormatCheck, FormatConfig, check_format, parse_choice
from sotopia_env.training.rewards.user_sim import (
    ConditionReport,
    ItemReport,
    ResponseRecord,
    item_selection_reward,
    parse_item_choice,
    response_distribution,
)

__all__ = [
    "STAGES",
    "BatchSIPJudge",
    "ConditionReport",
    "FormatCheck",
    "FormatConfig",
    "ItemReport",
    "JudgeError",
    "LLMSIPJudge",
    "ResponseRecord",
    "RuleBasedSIPJudge",
    "SIPJudge",
    "SocialIQaItem",
    "SocialIQaRewardConfig",
    "SocialIQaRewards",
    "SocialR1Config",
    "SocialR1Score",
    "StageJudgement",
    "build_prompt",
    "check_format",
    "evaluate_socialiqa",
    "item_selection_reward",
    "length_factor",
    "load_socialiqa",
    "make_social_r1_reward",
    "make_socialiqa_rewards",
    "parse_choice",
    "parse_item_choice",
    "response_distribution",
    "social_r1_scores",
    "socialiqa_answer_reward",
    "socialiqa_format_reward",
    "socialiqa_reward",
    "wilson_interval",
]
