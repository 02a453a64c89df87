"""Evaluator specs, as the CLI, configs and the pipeline name them: the one factory for judges.

- ``none``: no evaluator (episodes are stored unrated by choice);
- ``rule-based``: the offline, deterministic ``RuleBasedEvaluator`` (for smoke runs and tests);
- ``verifiable``: the exact judge of verifiable scenarios and games (``VerifiableJudge``): the goal dimension,
  from the transcript (other dimensions are not rated);
- a name registered with ``register_evaluator``, or by an installed package's entry point in the group
  ``sotopia_env.evaluators`` (``my-judge = my_package.judge:MyJudge``): its factory, called with the dimensions;
- anything else: a model spec (as ``--agent1`` takes) for an ``LLMEvaluator`` on the shared backend.

An embedded model (``smollm2-135m``) judges with reasonings of at most ``EMBEDDED_REASONING`` characters: its
scores are a smoke test, not a measurement (``run`` says so), and fourteen long reasonings from a 135M model
would take minutes on a CPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from sotopia_env.errors import UserError, did_you_mean
from sotopia_env.evaluators.base import Evaluator
from sotopia_env.evaluators.dimensions import Dimension, dimensions_from_config
from sotopia_env.evaluators.llm import LLMEvaluator
from sotopia_env.evaluators.rule_based import RuleBasedEvaluator
from sotopia_env.evaluators.verifiable import VerifiableJudge

NO_EVALUATOR = "none"
RULE_BASED = "rule-based"
VERIFIABLE = "verifiable"
EMBEDDED_REASONING = 60
ENTRY_POINT_GROUP = "sotopia_env.evaluators"

EvaluatorFactory = Callable[[tuple[Dimension, ...]], Evaluator]  # the dimensions -> an evaluator (a class will do)
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_factories: dict[str, EvaluatorFactory] = {RULE_BASED: RuleBasedEvaluator, VERIFIABLE: VerifiableJudge}
_entry_points_loaded = False


class EvaluatorSpecError(UserError, ValueError):
    """An evaluator that cannot be registered or built by name; the message names it."""


def register_evaluator(name: str, factory: EvaluatorFactory, replace: bool = False) -> EvaluatorFactory:
    """Make ``name`` an evaluator spec: ``make_evaluator(name, dimensions)`` calls ``factory(dimensions)``. A name
    taken by another factory (or ``none``) is an ``EvaluatorSpecError`` unless ``replace``."""
    _load_entry_points()
    key = name.strip().lower()
    if not _NAME.match(key) or key == NO_EVALUATOR:
        raise EvaluatorSpecError(f"evaluator name {name!r}: lower case letters, digits, '-' or '_', and not 'none'")
    if _factories.get(key, factory) is not factory and not replace:
        raise EvaluatorSpecError(f"evaluator name {name!r} is taken (pass replace=True to replace it)")
    _factories[key] = factory
    return factory


def unregister_evaluator(name: str) -> None:
    """Forget the evaluator spec ``name`` (a test's toy judge, say)."""
    _factories.pop(name.strip().lower(), None)


def evaluator_names() -> list[str]:
    """The registered evaluator specs (besides ``none`` and model specs)."""
    _load_entry_points()
    return sorted(_factories)


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            factory = point.load()
        except Exception as exc:
            _entry_points_loaded = False  # every later lookup says so again, rather than go on without it
            where = f"entry point {point.name!r} ({point.value}, group {ENTRY_POINT_GROUP})"
            raise EvaluatorSpecError(f"{where} failed to load: {type(exc).__name__}: {exc}") from None
        _factories.setdefault(point.name.strip().lower(), factory)


def make_evaluator(
    spec: str, dimensions: str | list[dict[str, Any]] = "sotopia", api_base: str | None = None
) -> Evaluator | None:
    """The evaluator ``spec`` names on ``dimensions`` ('sotopia', 'goal' or a comma list); None for ``none``."""
    chosen = dimensions_from_config(dimensions)  # checked even for 'none': a typo is an error wherever it is
    key = spec.strip().lower()
    if key == NO_EVALUATOR:
        return None
    _load_entry_points()
    if key in _factories:
        return _factories[key](chosen)
    from sotopia_env.backends.resolve import resolve_backend
    from sotopia_env.embedded_models import EMBEDDED_MODELS, UnknownModel

    try:
        backend = resolve_backend(spec, api_base=api_base)
    except UnknownModel as exc:  # a judge's name misspelt reads as an unknown model: say what a judge may be
        names = [NO_EVALUATOR, *_factories]
        hint = did_you_mean(key, [*names, *EMBEDDED_MODELS], "'sotopia-env models list' lists the embedded models")
        raise UnknownModel(
            f"evaluator {spec!r}: not a judge's name ({', '.join(names)}), an embedded model or a model litellm "
            f"knows; write PROVIDER/MODEL (e.g. openai/gpt-4o-mini), or give --api-base for your own server{hint}"
        ) from exc
    if spec in EMBEDDED_MODELS:  # always played locally, api_base or not
        return LLMEvaluator(backend, dimensions=chosen, max_reasoning=EMBEDDED_REASONING)
    return LLMEvaluator(backend, dimensions=chosen)
