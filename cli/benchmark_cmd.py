"""``sotopia-env benchmark``: a model against a partner on a scenario set, in both seats, rated and reported.

The options are the fields of one ``episodes.benchmark.BenchmarkSpec`` (the body ``POST /api/benchmarks`` takes),
with its defaults, limits and help (``options.spec_option``); they parse into one, the one planner
(``episodes.plan.plan_episodes``) plans it, and ``run_benchmark`` plays it: the store is checked before anything is
played; every episode then goes through ``run_batch`` -> ``episodes.runner.run_episode`` (play -> rate -> store,
store faults retried, then spilled).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

from sotopia_env.cli.common import check_output_file, console, fail, user_errors
from sotopia_env.cli.options import (
    AgentsPath,
    ApiBase,
    RayAddress,
    RayGpus,
    RayPinEndpoints,
    RayWorkers,
    ScenariosDir,
    Store,
    StoreRetry,
    library,
    model_servers,
    parsed_spec,
    ray_config,
    spec_option,
)
from sotopia_env.episodes.benchmark import BenchmarkSpec
from sotopia_env.episodes.gc_tuning import tune_gc_for_batch


def benchmark(
    model: str = spec_option(BenchmarkSpec, "model", "--model"),
    partner: str = spec_option(BenchmarkSpec, "partner", "--partner"),
    evaluator: str = spec_option(BenchmarkSpec, "evaluator", "--evaluator"),
    scenarios: str = spec_option(BenchmarkSpec, "scenarios", "--scenarios"),
    episodes_per_scenario: int = spec_option(BenchmarkSpec, "episodes_per_scenario", "--episodes-per-scenario"),
    concurrency: int = spec_option(BenchmarkSpec, "concurrency", "--concurrency"),
    max_turns: int = spec_option(BenchmarkSpec, "max_turns", "--max-turns"),
    seed: int = spec_option(BenchmarkSpec, "seed", "--seed"),
    dimensions: str = spec_option(BenchmarkSpec, "dimensions", "--dimensions"),
    api_base: list[str] = ApiBase,
    max_calls: int = spec_option(BenchmarkSpec, "max_calls", "--max-calls"),
    store: str = Store,
    store_retry_seconds: float = StoreRetry,
    tag: str = spec_option(BenchmarkSpec, "tag", "--tag"),
    rerun_failed: bool = spec_option(BenchmarkSpec, "rerun_failed", "--rerun-failed"),
    scenarios_dir: list[Path] = ScenariosDir,
    json_out: Path = typer.Option(None, "--json", help="Also write the report as JSON."),
    png: Path = typer.Option(None, "--png", help="Also draw the report as a PNG chart."),
    agents_path: list[Path] = AgentsPath,
    ray: str = RayAddress,
    ray_workers: int = RayWorkers,
    ray_gpus_per_worker: float = RayGpus,
    ray_pin_endpoints: bool = RayPinEndpoints,
    protocol: str = spec_option(
        BenchmarkSpec,
        "protocol",
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
    from sotopia_env.cli.episodes_cmds import open_store_or_fail
    from sotopia_env.cli.render import show_cards
    from sotopia_env.cli.run_cmd import SMALL_JUDGE_NOTE
    from sotopia_env.embedded_models import EMBEDDED_MODELS
    from sotopia_env.episodes.benchmark import check_benchmark_services, run_benchmark
    from sotopia_env.episodes.game_report import print_role_table
    from sotopia_env.episodes.plan import plan_episodes
    from sotopia_env.episodes.preflight import PreflightFailed
    from sotopia_env.episodes.report import plot_report, print_report
    from sotopia_env.episodes.runner import EpisodesFailed, check_batch
    from sotopia_env.errors import UserError

    options = {
        "model": model,
        "partner": partner,
        "evaluator": evaluator,
        "scenarios": scenarios,
        "episodes_per_scenario": episodes_per_scenario,
        "concurrency": concurrency,
        "max_turns": max_turns,
        "seed": seed,
        "dimensions": dimensions,
        "tag": tag,
        "api_base": model_servers(api_base),
        "max_calls": max_calls,
        "rerun_failed": rerun_failed,
        "protocol": protocol,
    }
    spec = parsed_spec(BenchmarkSpec, options)
    if protocol is not None and scenarios_dir:
        raise fail(f"--protocol {protocol} fixes --scenarios-dir")
    check_output_file(json_out, "--json")
    check_output_file(png, "--png")
    st = open_store_or_fail(store, writable=True)
    with user_errors(ValueError):  # LibraryError, NoEligibleCharacters, AgentSpecError, ProtocolNotImported
        plan = plan_episodes(spec, library(scenarios_dir), st, flags=True)
    if ray is None:  # every spec builds before anything plays: a typo is one line, not a batch of failures
        with user_errors(UserError, ValueError):  # (built once: backends are shared)
            plan.judge()
            for agent in dict.fromkeys([model, partner]):
                plan.agents()(agent, 0)
    with user_errors(PreflightFailed):  # a wrong key or a dead server: one line, exit 1, nothing played or stored
        asyncio.run(check_benchmark_services(spec))
    tune_gc_for_batch()
    ray_cfg = ray_config(ray, ray_workers, ray_gpus_per_worker, ray_pin_endpoints)
    with user_errors(UserError):  # StoreError, RayError
        result = asyncio.run(
            run_benchmark(spec, st, plan=plan, progress=True, retry_seconds=store_retry_seconds, ray=ray_cfg)
        )
    summary = result.summary
    console.print(
        f"{summary.total} episodes: {summary.skipped} already done, {summary.rated} rated, "
        f"{summary.unrated} unrated, {summary.failed} failed ({summary.wall_seconds:.1f}s)"
    )
    with user_errors(UserError):
        cards = show_cards(st.iter(spec.chosen_tag), console, spec.chosen_tag)
    print_report(result.report, console)
    if evaluator in EMBEDDED_MODELS:  # the same caveat as run's: a 135M judge's scores are not a measurement
        console.print(SMALL_JUDGE_NOTE.format(judge=evaluator), highlight=False)
    if result.roles:
        print_role_table(result.roles, console)
    if json_out:
        import json

        json_out.write_text(json.dumps(result.to_dict() | cards, indent=2))
    if png:
        plot_report(result.report, str(png))
    with user_errors(EpisodesFailed):  # an outage mid-run is never a score, nor exit 0
        check_batch(summary, st, spec.chosen_tag)
