"""Evaluators: SOTOPIA-EVAL's judges behind one factory, ``make_evaluator(spec)``.

- ``base``: the interface (``Evaluator``, ``EpisodeContext``, ``EpisodeRating``) and the one safe rating call;
- ``dimensions``: SOTOPIA-EVAL's seven dimensions and the sets a config names;
- one module per evaluator: ``llm`` (``LLMEvaluator``, any backend), ``verifiable`` (``VerifiableJudge``, exact,
  for verifiable scenarios and games), ``rule_based`` (``RuleBasedEvaluator``, offline smoke runs);
- ``factory``: ``make_evaluator`` and ``register_evaluator`` (a new evaluator is one module; CONTRIBUTING.md).

A rating that could not be obtained is unrated with its error, never a score of 0.
"""

from sotopia_env.evaluators.base import (
    AgentRating,
    DimensionScore,
    EpisodeContext,
    EpisodeRating,
    Evaluator,
    SyncFromAsync,
    aevaluate_safely,
    evaluate_safely,
    failed_rating,
    run_to_completion,
    validate_scores,
)
from sotopia_env.evaluators.dimensions import GOAL_ONLY, SOTOPIA_DIMENSIONS, Dimension, dimensions_from_config
from sotopia_env.evaluators.factory import (
    NO_EVALUATOR,
    RULE_BASED,
    VERIFIABLE,
    EvaluatorSpecError,
    evaluator_names,
    make_evaluator,
    register_evaluator,
    unregister_evaluator,
)
from sotopia_env.evaluators.llm import LLMEvaluator
from sotopia_env.evaluators.rule_based import RuleBasedEvaluator
from sotopia_env.evaluators.verifiable import VerifiableJudge

__all__ = [
    "GOAL_ONLY",
    "NO_EVALUATOR",
    "RULE_BASED",
    "SOTOPIA_DIMENSIONS",
    "VERIFIABLE",
    "AgentRating",
    "Dimension",
    "DimensionScore",
    "EpisodeContext",
    "EpisodeRating",
    "Evaluator",
    "EvaluatorSpecError",
    "LLMEvaluator",
    "RuleBasedEvaluator",
    "SyncFromAsync",
    "VerifiableJudge",
    "aevaluate_safely",
    "dimensions_from_config",
    "evaluate_safely",
    "evaluator_names",
    "failed_rating",
    "make_evaluator",
    "register_evaluator",
    "run_to_completion",
    "unregister_evaluator",
    "validate_scores",
]
