"""``sotopia-env benchmark``: a model against a partner on a scenario set, in both seats, rated and reported.

The store is checked before anything is played; every episode then goes through ``run_batch`` ->
``episodes.runner.run_episode`` (play -> rate -> store, store faults retried, then spilled to a file).
"""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path

import typer

from sotopia_env.cli.common import check_output_file, console, user_errors
from sotopia_env.cli.options import (
    AgentsPath,
    ApiBase,
    Dimensions,
    MaxCalls,
    RayAddress,
    RayGpus,
    RayPinEndpoints,
    RayWorkers,
    ScenariosDir,
    Store,
    StoreRetry,
    api_base_value,
    library,
    ray_config,
)
from sotopia_env.episodes.gc_tuning import tune_gc_for_batch


def benchmark(
    model: str = typer.Option("smollm2-135m", "--model", help="The model under test (plays every seat in turn)."),
    partner: str = typer.Option(
        "smollm2-135m",
        "--partner",
        help="The fixed partner(s): a model spec, 'rule-partner' (verifiable scenarios) or 'rule-player' (games).",
    ),
    evaluator: str = typer.Option(
        "smollm2-135m", "--evaluator", help="The judge's model spec, or 'verifiable' (exact, verifiable scenarios)."
    ),
    scenarios: str = typer.Option(
        "test", "--scenarios", help="all, hard, test, dev, train, a tag, TAG:SPLIT (verifiable:test), or comma ids."
    ),
    episodes_per_scenario: int = typer.Option(
        1, "--episodes-per-scenario", min=1, max=10_000, help="Character pairings per scenario (each in both seats)."
    ),
    concurrency: int = typer.Option(8, "--concurrency", min=1, max=100_000, help="Episodes in flight at once."),
    max_turns: int = typer.Option(20, "--max-turns", min=1, max=1000),
    seed: int = typer.Option(0, "--seed"),
    dimensions: str = Dimensions,
    api_base: list[str] = ApiBase,
    max_calls: int = MaxCalls,
    store: str = Store,
    store_retry_seconds: float = StoreRetry,
    tag: str = typer.Option(None, "--tag", help="Tag for the episodes (default: benchmark-MODEL-vs-PARTNER)."),
    rerun_failed: bool = typer.Option(False, "--rerun-failed", help="Rerun failed or unrated episodes of the tag."),
    scenarios_dir: list[Path] = ScenariosDir,
    json_out: Path = typer.Option(None, "--json", help="Also write the report as JSON."),
    png: Path = typer.Option(None, "--png", help="Also draw the report as a PNG chart."),
    agents_path: list[Path] = AgentsPath,
    ray: str = RayAddress,
    ray_workers: int = RayWorkers,
    ray_gpus_per_worker: float = RayGpus,
    ray_pin_endpoints: bool = RayPinEndpoints,
    protocol: str = typer.Option(
        None,
        "--protocol",
        help="SOTOPIA's published protocol: sotopia-hard (its 14 hard scenarios) or sotopia-all (all 90), 5 "
        "character pairs each, MODEL in both seats, 20 turns, all seven dimensions; on SOTOPIA episodes imported "
        "with 'episodes import PATH --format sotopia'. Fixes --scenarios, --episodes-per-scenario, --max-turns "
        "and --dimensions.",
    ),
) -> None:
    """Run MODEL against PARTNER on every chosen scenario, MODEL in each seat in turn with PARTNER in the others
    (verifiable scenarios: MODEL in seat 1 only); resumable under its tag. On games (--scenarios game, with
    --partner rule-player and --evaluator verifiable) it also reports each role's win rate, with a Wilson 95%
    interval. The protocol card of the results is printed and stored in --json as "cards"."""
    from sotopia_env.agents.loading import AgentSpecError
    from sotopia_env.agents.rule_partners import check_rule_specs
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.cli.episodes_cmds import open_store_or_fail
    from sotopia_env.cli.render import show_cards
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.game_report import print_role_table, role_win_rates, with_roles
    from sotopia_env.episodes.jobs import benchmark_jobs, setup_versus_jobs
    from sotopia_env.episodes.ray_batch import BatchRecipe, run_batch_on_ray
    from sotopia_env.episodes.report import build_report, plot_report, print_report
    from sotopia_env.episodes.runner import default_agent_factory, run_batch
    from sotopia_env.episodes.sotopia_protocol import get_protocol, protocol_setups
    from sotopia_env.episodes.store import StoreError, default_store_url
    from sotopia_env.errors import UserError
    from sotopia_env.evaluator_spec import make_evaluator
    from sotopia_env.library import LibraryError
    from sotopia_env.llm_evaluator import dimensions_from_config
    from sotopia_env.sampler import NoEligibleCharacters

    check_output_file(json_out, "--json")
    check_output_file(png, "--png")
    st = open_store_or_fail(store, writable=True)
    with user_errors(LibraryError, NoEligibleCharacters, AgentSpecError, ValueError):
        if protocol is not None:
            spec = get_protocol(protocol)
            fixed = {
                "--scenarios": scenarios != "test",
                "--episodes-per-scenario": episodes_per_scenario != 1,
                "--max-turns": max_turns != spec.max_turns,
                "--dimensions": dimensions != spec.dimensions,
                "--scenarios-dir": bool(scenarios_dir),
            }
            if any(fixed.values()):
                raise ValueError(f"--protocol {protocol} fixes {', '.join(k for k, v in fixed.items() if v)}")
            setups = protocol_setups(st, spec)
            chosen = list({s.scenario.id: s.scenario for s in setups}.values())
            check_rule_specs(chosen, ["", partner], evaluator)
            jobs = setup_versus_jobs(setups, model, partner)
        else:
            lib = library(scenarios_dir)
            chosen, jobs = benchmark_jobs(lib, scenarios, model, partner, evaluator, episodes_per_scenario, seed)
        make_judge = partial(make_evaluator, evaluator, dimensions, api_base_value(api_base))
        dimensions_from_config(dimensions)  # checked here; with --ray every worker builds its own judge
        judge = make_judge() if ray is None else None
    tag = tag or f"benchmark-{f'{protocol}-' if protocol else ''}{model}-vs-{partner}"
    settings = GenerationSettings(seed=seed)
    prompt = get_protocol(protocol).prompt if protocol is not None else None  # None: each model's own
    make_agents = partial(default_agent_factory, settings=settings, api_base=api_base_value(api_base), prompt=prompt)
    config = EnvConfig(max_turns=max_turns)
    if ray is None:  # every spec builds before anything plays: a typo is one line, not a batch of failures
        with user_errors(UserError):
            for spec in dict.fromkeys([model, partner]):
                make_agents()(spec, 0)
    tune_gc_for_batch()
    with user_errors(UserError):  # StoreError, RayError
        if ray is not None:
            recipe = BatchRecipe(
                store or default_store_url(),
                tag,
                make_agents,
                make_judge,
                concurrency,
                config,
                rerun_failed,
                store_retry_seconds,
                max_calls=max_calls,
            )
            ray_cfg = ray_config(ray, ray_workers, ray_gpus_per_worker, ray_pin_endpoints)
            summary = run_batch_on_ray(jobs, st, recipe, ray_cfg)
        else:
            summary = asyncio.run(
                run_batch(
                    jobs,
                    st,
                    tag,
                    judge,
                    make_agents(),
                    concurrency,
                    config,
                    rerun_failed,
                    retry_seconds=store_retry_seconds,
                    max_calls=max_calls,
                )
            )
    console.print(
        f"{summary.total} episodes: {summary.skipped} already done, {summary.rated} rated, "
        f"{summary.unrated} unrated, {summary.failed} failed ({summary.wall_seconds:.1f}s)"
    )
    with user_errors(StoreError):
        rep = build_report(st.iter(tag), tag=tag)
        roles = role_win_rates(st.iter(tag)) if any(s.game is not None for s in chosen) else []
        cards = show_cards(st.iter(tag), console, tag)
    print_report(rep, console)
    if roles:
        print_role_table(roles, console)
    if json_out:
        import json

        json_out.write_text(json.dumps(with_roles(rep.to_dict(), roles) | cards, indent=2))
    if png:
        plot_report(rep, str(png))
