"""Evaluator specs, as the CLI, configs and the pipeline name them: the one factory for judges.

- ``none``: no evaluator (episodes are stored unrated by choice);
- ``rule-based``: the offline, deterministic ``RuleBasedEvaluator`` (for smoke runs and tests);
- ``verifiable``: the rule judge of verifiable scenarios (``sotopia_env.verifiable.VerifiableJudge``): the goal
  dimension, exact, from the transcript (other dimensions are not rated);
- anything else: a model spec (as ``--agent1`` takes) for an ``LLMEvaluator`` on the shared backend.

An embedded model (``smollm2-135m``) judges with reasonings of at most ``EMBEDDED_REASONING`` characters: its
scores are a smoke test, not a measurement (``run`` says so), and fourteen long reasonings from a 135M model
would take minutes on a CPU.
"""

from __future__ import annotations

from sotopia_env.evaluation import Evaluator

NO_EVALUATOR = "none"
RULE_BASED = "rule-based"
VERIFIABLE = "verifiable"
EMBEDDED_REASONING = 60


def make_evaluator(spec: str, dimensions: str = "sotopia", api_base: str | None = None) -> Evaluator | None:
    """The evaluator ``spec`` names on ``dimensions`` ('sotopia', 'goal' or a comma list); None for ``none``."""
    from sotopia_env.llm_evaluator import dimensions_from_config

    chosen = dimensions_from_config(dimensions)  # checked even for 'none': a typo is an error wherever it is
    if spec.strip().lower() == NO_EVALUATOR:
        return None
    if spec.strip().lower() == RULE_BASED:
        from sotopia_env.evaluation import RuleBasedEvaluator

        return RuleBasedEvaluator(chosen)
    if spec.strip().lower() == VERIFIABLE:
        from sotopia_env.verifiable import VerifiableJudge

        return VerifiableJudge(chosen)
    from sotopia_env.backends.resolve import resolve_backend
    from sotopia_env.embedded_models import EMBEDDED_MODELS
    from sotopia_env.llm_evaluator import LLMEvaluator

    backend = resolve_backend(spec, api_base=api_base)
    if spec in EMBEDDED_MODELS:  # always played locally, api_base or not
        return LLMEvaluator(backend, dimensions=chosen, max_reasoning=EMBEDDED_REASONING)
    return LLMEvaluator(backend, dimensions=chosen)
