"""``sotopia-env run``: one episode, printed as it happens, then rated and stored.

The options parse into one ``episodes.plan.RunSpec`` (the body ``POST /api/simulations`` takes), which the one
planner (``episodes.plan.plan_episodes``) turns into the episode: its seats' agents, the judge a game needs.
The store is checked first (nothing is played for a store that cannot keep the episode), then every model
service the seats and the judge use (``episodes.preflight``: a wrong key or a dead server is one line and exit
1); the episode then goes through ``episodes.runner.run_episode``, the one play -> rate -> store path.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer
from rich.markup import escape

from sotopia_env.agents.llm import CHAT_SETTINGS as CHAT_SETTINGS  # what run's agents sample with (RunSpec's)
from sotopia_env.cli.common import console, fail, user_errors
from sotopia_env.cli.options import (
    AgentsPath,
    ApiBase,
    Dimensions,
    Evaluator,
    ScenariosDir,
    Store,
    StoreRetry,
    library,
    model_servers,
    parsed_spec,
    spec_option,
)
from sotopia_env.episodes.job_fields import DEFAULT_MODEL
from sotopia_env.episodes.plan import VERIFIABLE as VERIFIABLE
from sotopia_env.episodes.plan import RunSpec

SMALL_JUDGE_NOTE = (
    "[yellow]note:[/] the judge is the embedded {judge} model, too small to rate: its scores are not meaningful. "
    "For real ratings use a real judge: --evaluator gpt-4o-mini (with OPENAI_API_KEY), "
    "or --evaluator MODEL --api-base URL."
)


def run(
    scenario: str = spec_option(RunSpec, "scenario", "--scenario", help="Scenario id (default: sampled with --seed)."),
    agent1: str = typer.Option(DEFAULT_MODEL, "--agent1", help="Model spec, alias, 'human' or module:Class."),
    agent2: str = typer.Option(
        DEFAULT_MODEL,
        "--agent2",
        help="Model spec, alias, 'human', 'rule-partner' (verifiable scenarios) or module:Class.",
    ),
    agents: str = typer.Option(
        None,
        "--agents",
        help="Comma list of specs: one for every seat, or one per seat (scenarios of 3+ seats, games: "
        "'rule-player' plays a game by its rules). Default: --agent1 in seat 1, --agent2 in the others.",
    ),
    seed: int = spec_option(
        RunSpec, "seed", "--seed", help="Seeds scenario/character sampling, the env and generation."
    ),
    max_turns: int = spec_option(RunSpec, "max_turns", "--max-turns"),
    evaluator: str = Evaluator,
    dimensions: str = Dimensions,
    api_base: list[str] = ApiBase,
    store: str = Store,
    store_retry_seconds: float = StoreRetry,
    no_store: bool = typer.Option(False, "--no-store", help="Do not save the episode."),
    tag: str = spec_option(RunSpec, "tag", "--tag", help="Tag the stored episode."),
    scenarios_dir: list[Path] = ScenariosDir,
    agents_path: list[Path] = AgentsPath,
) -> None:
    """Run one episode and print the transcript as it happens. With no model arguments every agent
    (and the judge) uses the embedded SmolLM2-135M: no API key, no server. A game is judged by its rules
    unless --evaluator names another judge."""
    from sotopia_env.agents.loading import AgentSpecError
    from sotopia_env.cli.episodes_cmds import open_store_or_fail
    from sotopia_env.episodes.plan import plan_episodes
    from sotopia_env.episodes.preflight import PreflightFailed, check_services
    from sotopia_env.episodes.runner import run_episode
    from sotopia_env.episodes.store import StoreError
    from sotopia_env.episodes.store_writer import StoreWriter
    from sotopia_env.sampler import NoEligibleCharacters
    from sotopia_env.transcript import render_action

    given = run_agents(agents, agent1, agent2)
    options = {"scenario": scenario, **given, "evaluator": evaluator, "dimensions": dimensions}
    options |= {"max_turns": max_turns, "seed": seed, "tag": tag, "api_base": model_servers(api_base)}
    spec = parsed_spec(RunSpec, options)
    writer = None if no_store else StoreWriter(open_store_or_fail(store, writable=True), tag, store_retry_seconds)
    lib = library(scenarios_dir)
    with user_errors(ValueError, NoEligibleCharacters):  # the one planner: seats, the judge a game needs, rules
        plan = plan_episodes(spec, lib, flags=True)
    with user_errors(AgentSpecError, ValueError, OSError):  # before any output: an error is one line
        seated = plan.seated()
        judge = plan.judge()
    with user_errors(PreflightFailed):  # a wrong key or a dead server: one line, exit 1, nothing stored
        check_services([*seated, judge])
    setup = plan.setup
    console.rule(f"[bold]{setup.scenario.id}[/]  ({setup.scenario.relationship.name})")
    console.print(setup.scenario.scenario, highlight=False)
    for name, goal in zip(setup.agent_names, setup.scenario.goals, strict=True):
        console.print(f"[bold]{name}[/] goal: {goal}", highlight=False)
    console.rule()

    def show(turn) -> None:
        line = render_action(turn.agent, turn.action, turn.action.to)
        if turn.audience is not None and not turn.action.to:
            line += f"  (seen by {', '.join(turn.audience)})"
        suffix = f"  [red](agent error: {escape(turn.action.error)})[/]" if turn.action.error else ""
        console.print(f"[dim]#{turn.turn}[/] {escape(line)}{suffix}", highlight=False)

    log = asyncio.run(
        run_episode(plan.jobs[0], judge, writer, agents=seated, tag=tag, config=plan.config(), on_turn=show)
    )
    console.rule(f"ended: {log.termination_reason}")
    if log.rating is None:
        console.print("not rated (--evaluator none)" if judge is None else "not rated")
    elif log.rating.ratings is None:
        console.print(f"[yellow]unrated:[/] {log.rating.error}", highlight=False)
    else:
        from sotopia_env.cli.render import ratings_table
        from sotopia_env.embedded_models import EMBEDDED_MODELS

        console.print(ratings_table(log))
        for name, why in (log.rating.unrated or {}).items():
            console.print(f"[yellow]unrated:[/] {name}: {why}", highlight=False)
        if plan.evaluator in EMBEDDED_MODELS:
            console.print(SMALL_JUDGE_NOTE.format(judge=plan.evaluator), highlight=False)
    if writer is not None:
        with user_errors(StoreError):
            writer.finish()
        console.print(f"stored episode {log.id} in {writer.store.url} (tag {tag!r})")
    if log.status == "failed":
        raise fail(f"the episode failed: {log.error}")


def run_agents(agents: str | None, agent1: str, agent2: str) -> dict[str, object]:
    """``RunSpec``'s ``agents`` (and ``partner``) from the options: ``--agents`` (a comma list: one spec for all,
    or one per seat), else ``--agent1`` in seat 1 and ``--agent2`` in every other."""
    if agents is None:
        return {"agents": [agent1], "partner": agent2}
    return {"agents": [a.strip() for a in agents.split(",") if a.strip()]}
