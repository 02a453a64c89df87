"""Evaluator specs, as the CLI, configs and the pipeline name them: the one factory for judges.

- ``none``: no evaluator (episodes are stored unrated by choice);
- ``rule-based``: the offline, deterministic ``RuleBasedEvaluator`` (for smoke runs and tests);
- ``verifiable``: the exact judge of verifiable scenarios and games (``VerifiableJudge``): the goal dimension,
  from the transcript (other dimensions are not rated);
- a name registered with ``register_evaluator`` (``EVALUATORS``, a ``sotopia_env.registry.Registry``), or by an
  installed package's entry point in the group ``sotopia_env.evaluators`` (``my-judge = my_package.judge:MyJudge``):
  its factory, called with the dimensions;
- anything else: a model spec (as ``--agent1`` takes) for an ``LLMEvaluator`` on the shared backend.

An embedded model (``smollm2-135m``) judges with reasonings of at most ``EMBEDDED_REASONING`` characters: its
scores are a smoke test, not a measurement (``run`` says so), and fourteen long reasonings from a 135M model
would take minutes on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sotopia_env.backends.endpoints import ApiBase
from sotopia_env.errors import UserError, did_you_mean
from sotopia_env.evaluators.base import Evaluator
from sotopia_env.evaluators.dimensions import Dimension, dimensions_from_config
from sotopia_env.evaluators.llm import LLMEvaluator
from sotopia_env.evaluators.rule_based import RuleBasedEvaluator
from sotopia_env.evaluators.verifiable import VerifiableJudge
from sotopia_env.registry import Registry
from sotopia_env.specs import NO_EVALUATOR, EvaluatorSpec

RULE_BASED = "rule-based"
VERIFIABLE = "verifiable"
EMBEDDED_REASONING = 60
ENTRY_POINT_GROUP = "sotopia_env.evaluators"

EvaluatorFactory = Callable[[tuple[Dimension, ...]], Evaluator]  # the dimensions -> an evaluator (a class will do)


class EvaluatorSpecError(UserError, ValueError):
    """An evaluator that cannot be registered or built by name; the message names it."""


def _check_factory(factory: Any, where: str) -> EvaluatorFactory:
    if not callable(factory):
        raise EvaluatorSpecError(f"{where}: {factory!r} is not an evaluator factory (dimensions -> an evaluator)")
    return factory


EVALUATORS: Registry[EvaluatorFactory] = Registry(
    "evaluator",
    ENTRY_POINT_GROUP,
    error=EvaluatorSpecError,
    check=_check_factory,
    normalize=lambda name: name.strip().lower(),
)
EVALUATORS.register(RULE_BASED, RuleBasedEvaluator)
EVALUATORS.register(VERIFIABLE, VerifiableJudge)


def register_evaluator(name: str, factory: EvaluatorFactory, replace: bool = False) -> EvaluatorFactory:
    """Make ``name`` an evaluator spec: ``make_evaluator(name, dimensions)`` calls ``factory(dimensions)``. A name
    taken by another factory (or ``none``) is an ``EvaluatorSpecError`` unless ``replace``."""
    if name.strip().lower() == NO_EVALUATOR:
        raise EvaluatorSpecError(f"evaluator name {name!r}: lower case letters, digits, '-' or '_', and not 'none'")
    EVALUATORS.load_entry_points()  # an installed evaluator of that name is a conflict, whichever comes first
    return EVALUATORS.register(name, factory, replace=replace)


def unregister_evaluator(name: str) -> None:
    """Forget the evaluator spec ``name`` (a test's toy judge, say)."""
    EVALUATORS.unregister(name)


def evaluator_names() -> list[str]:
    """The registered evaluator specs (besides ``none`` and model specs)."""
    return EVALUATORS.names()


def make_evaluator(
    spec: EvaluatorSpec | str, dimensions: str | list[dict[str, Any]] = "sotopia", api_base: ApiBase = None
) -> Evaluator | None:
    """The evaluator ``spec`` names on ``dimensions`` ('sotopia', 'goal' or a comma list); None for ``none``.
    ``spec`` is an ``EvaluatorSpec``, or a string parsed here once (``sotopia_env.specs``)."""
    chosen = dimensions_from_config(dimensions)  # checked even for 'none': a typo is an error wherever it is
    spec = EvaluatorSpec.parse(spec)
    key = spec.key
    if spec.is_none:
        return None
    if key in EVALUATORS:
        return EVALUATORS[key](chosen)
    from sotopia_env.backends.resolve import resolve_backend
    from sotopia_env.embedded_models import EMBEDDED_MODELS, UnknownModel

    assert spec.model is not None  # every spec but 'none' is a model spec too
    try:
        backend = resolve_backend(spec.model, api_base=api_base)
    except UnknownModel as exc:  # a judge's name misspelt reads as an unknown model: say what a judge may be
        names = [NO_EVALUATOR, *EVALUATORS]
        hint = did_you_mean(key, [*names, *EMBEDDED_MODELS], "'sotopia-env models list' lists the embedded models")
        raise UnknownModel(
            f"evaluator {spec.text!r}: not a judge's name ({', '.join(names)}), an embedded model or a model litellm "
            f"knows; write PROVIDER/MODEL (e.g. openai/gpt-4o-mini), or give --api-base for your own server{hint}"
        ) from exc
    if spec.model.source == "embedded":  # always played locally, api_base or not
        return LLMEvaluator(backend, dimensions=chosen, max_reasoning=EMBEDDED_REASONING)
    return LLMEvaluator(backend, dimensions=chosen)
