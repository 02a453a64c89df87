"""Realistic ``EpisodeLog`` objects for tests, built from the built-in library.

Plain functions (no pytest here) so that test modules, subprocesses and scripts
can all import it. Everything is deterministic: the same arguments give the
same episode (``created_at`` steps one second per ``index``).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import lru_cache

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.backends.base import Usage
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.log import AgentSpec, EpisodeLog, combo_key
from sotopia_env.evaluators import SOTOPIA_DIMENSIONS, AgentRating, Dimension, DimensionScore, EpisodeRating
from sotopia_env.library import load_library
from sotopia_env.sampler import eligible_setups
from sotopia_env.transcript import Turn

BASE_TIME = datetime(2025, 3, 1, 9, 0, 0, tzinfo=timezone.utc)
DEFAULT_MODELS = ("smollm2-135m", "gpt-4o-mini")

_LINES: tuple[tuple[ActionType, str], ...] = (
    (ActionType.speak, "Hi! Thanks for making time for this. Do you have a minute to talk it through?"),
    (ActionType.speak, "Sure. To be honest, I was told \"it's non-negotiable\", so I'm curious what you have in mind."),
    (ActionType.non_verbal, "leans back and folds their arms"),
    (ActionType.speak, "Fair enough. What if we meet halfway: I cover the first part and you handle the rest?"),
    (ActionType.action, "slides a printed copy of the numbers across the table"),
    (ActionType.none, ""),
    (ActionType.speak, "Okay, that works for me.\nLet's write it down so nobody forgets."),
    (ActionType.leave, "Thanks, talk soon"),
)


@lru_cache(maxsize=1)
def setups() -> tuple[EpisodeSetup, ...]:
    """One two-seat setup for each built-in scenario that has one, in scenario-id order."""
    library = load_library()
    out = []
    for scenario_id in sorted(library.scenarios):
        scenario = library.scenarios[scenario_id]
        if scenario.num_agents != 2:
            continue
        options = eligible_setups(scenario, library)
        if options:
            out.append(options[0])
    return tuple(out)


def make_turns(setup: EpisodeSetup, n: int = len(_LINES)) -> list[Turn]:
    """``n`` round-robin turns, mixing every action type; the last turn is a ``leave`` when n is 8."""
    names = setup.agent_names
    return [
        Turn(turn=t, agent=names[t % len(names)], action=AgentAction(action_type=kind, argument=argument))
        for t, (kind, argument) in enumerate(_LINES[:n])
    ]


def make_rating(
    setup: EpisodeSetup,
    seed: int = 0,
    dimensions: tuple[Dimension, ...] = SOTOPIA_DIMENSIONS,
    evaluator: str = "llm:gpt-4o",
) -> EpisodeRating:
    """In-range scores that differ by seat, dimension and seed, each with its reasoning."""
    ratings = {}
    for seat, name in enumerate(setup.agent_names):
        scores = {}
        for k, dim in enumerate(dimensions):
            span = dim.high - dim.low + 1
            value = dim.low + (seed * 3 + seat * 5 + k * 2) % span
            scores[dim.name] = DimensionScore(score=value, reasoning=f"{name} scored {value} on {dim.name}.")
        ratings[name] = AgentRating(scores=scores)
    return EpisodeRating(evaluator=evaluator, ratings=ratings, attempts=1 + seed % 2)


def make_episode(
    index: int = 0,
    *,
    tag: str = "test",
    models: tuple[str, ...] = DEFAULT_MODELS,
    status: str = "rated",
    setup_index: int | None = None,
    repeat: int = 0,
    episode_id: str | None = None,
    created_at: str | None = None,
    n_turns: int = len(_LINES),
    dimensions: tuple[Dimension, ...] = SOTOPIA_DIMENSIONS,
) -> EpisodeLog:
    """One episode. ``status`` picks rated, unrated (evaluator error) or failed (episode error)."""
    all_setups = setups()
    setup = all_setups[(index if setup_index is None else setup_index) % len(all_setups)]
    names = setup.agent_names
    turns = make_turns(setup, n_turns)
    rating: EpisodeRating | None = None
    error = None
    if status == "rated":
        rating = make_rating(setup, index, dimensions)
    elif status == "unrated":
        rating = EpisodeRating(evaluator="llm:gpt-4o", error="evaluator output invalid after 3 attempts", attempts=3)
    elif status == "failed":
        error = "RuntimeError: backend connection reset"
        turns = turns[:2]
    else:
        raise ValueError(f"unknown status {status!r}")
    when = created_at or (BASE_TIME + timedelta(seconds=index)).isoformat(timespec="seconds")
    return EpisodeLog(
        id=episode_id or f"ep-{index:05d}",
        tag=tag,
        combo_key=combo_key(setup, list(models), repeat),
        setup=setup,
        agents=[AgentSpec(name=n, model=m, agent_class="LLMAgent") for n, m in zip(names, models, strict=True)],
        turns=turns,
        termination_reason=None if status == "failed" else ("everyone_left" if n_turns == len(_LINES) else "stale"),
        rating=rating,
        status=status,  # type: ignore[arg-type]
        error=error,
        agent_errors={names[0]: index % 2},
        usage={
            n: Usage(calls=4, prompt_tokens=812 + i, completion_tokens=95, llm_seconds=1.25)
            for i, n in enumerate(names)
        },
        created_at=when,
        wall_seconds=3.5 + index / 10,
    )


def make_episodes(n: int, start: int = 0, **kwargs: object) -> list[EpisodeLog]:
    return [make_episode(i, **kwargs) for i in range(start, start + n)]  # type: ignore[arg-type]


def write_episodes(url: str, worker: int, n: int) -> None:
    """Open the store at ``url`` and put ``n`` episodes with ids ``w<worker>-<j>`` (for multi-process tests)."""
    from sotopia_env.episodes.store import open_store

    store = open_store(url)
    try:
        for j in range(n):
            store.put(make_episode(worker * 1000 + j, episode_id=f"w{worker}-{j:03d}", tag="multi"))
    finally:
        store.close()
