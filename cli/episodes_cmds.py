"""``sotopia-env episodes list|show|export|import|evaluate`` and ``sotopia-env report``."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import typer

from sotopia_env.cli.common import check_output_file, console, fail, user_errors
from sotopia_env.cli.options import ApiBase, Dimensions, Store, StoreRetry, model_servers
from sotopia_env.episodes.gc_tuning import tune_gc_for_batch
from sotopia_env.limits import DEFAULT_CONCURRENCY, MAX_CONCURRENCY
from sotopia_env.specs import DEFAULT_MODEL

episodes_app = typer.Typer(help="List, show, export, import and (re)rate stored episodes.", no_args_is_help=True)


def open_store_or_fail(url: str | None, writable: bool = False):
    """The store, or a one-line error. ``writable``: also check it can be written now (before playing anything)."""
    from sotopia_env.episodes.store import StoreError, open_store

    try:
        st = open_store(url)
        if writable:
            st.ping()
        return st
    except StoreError as exc:
        raise fail(str(exc)) from None


@episodes_app.command("list")
def list_episodes(
    tag: str = typer.Option(None, help="Only this tag."),
    model: str = typer.Option(None, help="Only episodes where this model played a seat."),
    scenario: str = typer.Option(None, help="Only this scenario id."),
    status: str = typer.Option(None, help="rated, unrated or failed."),
    limit: int = typer.Option(50, min=0, max=1_000_000, help="At most this many."),
    store: str = Store,
) -> None:
    """List stored episodes, oldest first."""
    from rich.table import Table

    from sotopia_env.episodes.store import check_status

    with user_errors(ValueError):
        check_status(status)
    st = open_store_or_fail(store)
    table = Table("id", "tag", "scenario", "models", "end", "status", "goal")
    logs = st.query(tag=tag, model=model, scenario=scenario, status=status, limit=limit)
    for log in logs:
        goals = [log.score(a.name, "goal") for a in log.agents]
        goal = " / ".join("-" if g is None else f"{g:.0f}" for g in goals)
        table.add_row(
            log.id[:12],
            log.tag,
            log.scenario_id,
            " vs ".join(log.models),
            str(log.termination_reason),
            log.status,
            goal,
        )
    console.print(table)
    console.print(f"{len(logs)} shown of {st.count(tag=tag, model=model, scenario=scenario, status=status)}")


def _find(st, episode_id: str):
    try:
        return st.get(episode_id)
    except KeyError:
        matches = [log for log in st.iter() if log.id.startswith(episode_id)]
        if len(matches) == 1:
            return matches[0]
        raise fail(f"no episode with id {episode_id!r} in {st.url}") from None


@episodes_app.command("show")
def show(episode_id: str = typer.Argument(..., help="Episode id (or a unique prefix)."), store: str = Store) -> None:
    """Show one episode: setup, transcript, ratings."""
    from sotopia_env.cli.render import ratings_table
    from sotopia_env.transcript import render_transcript

    log = _find(open_store_or_fail(store), episode_id)
    console.rule(f"{log.id}  {log.scenario_id}  [{log.status}]")
    console.print(log.setup.scenario.scenario, highlight=False)
    for spec, goal in zip(log.agents, log.setup.scenario.goals, strict=False):
        console.print(f"[bold]{spec.name}[/] ({spec.model}) goal: {goal}", highlight=False)
    console.print(render_transcript(log.turns), highlight=False, markup=False)
    console.print(f"ended: {log.termination_reason}")
    if log.error:
        console.print(f"[red]failed:[/] {log.error}", highlight=False)
    elif log.rating and log.rating.ratings:
        console.print(ratings_table(log))
    elif log.rating:
        console.print(f"[yellow]unrated:[/] {log.rating.error}", highlight=False)


@episodes_app.command("export")
def export(
    path: Path = typer.Argument(..., help="Output .jsonl file (jsonl, sotopia-public) or directory (sotopia, hf)."),
    tag: str = typer.Option(None, help="Only this tag."),
    fmt: str = typer.Option(
        "jsonl",
        "--format",
        help="jsonl (ours), sotopia (SOTOPIA's EpisodeLog + profile files), sotopia-public (SOTOPIA's "
        "self-contained episodes_to_jsonl rows), hf (dataset dir).",
    ),
    store: str = Store,
) -> None:
    """Export episodes as our JSONL, one of SOTOPIA's layouts, or a Hugging Face dataset directory.

    Both SOTOPIA layouts leave unrated and failed episodes out: SOTOPIA would read their placeholder 0 as a score.
    """
    if fmt not in ("jsonl", "sotopia", "sotopia-public", "hf"):
        raise fail(f"--format {fmt!r}: expected jsonl, sotopia, sotopia-public or hf")
    if fmt in ("jsonl", "sotopia-public"):
        check_output_file(path, "PATH")
    elif path.is_file() or not path.absolute().parent.is_dir():
        raise fail(f"{path}: give a folder (new or existing) inside an existing folder for --format {fmt}")
    st = open_store_or_fail(store)
    logs = list(st.iter(tag))
    with user_errors(ValueError, OSError):
        if fmt == "jsonl":
            from sotopia_env.episodes.export import export_jsonl

            export_jsonl(logs, path)
        elif fmt == "sotopia":
            from sotopia_env.episodes.sotopia_format import export_sotopia

            export_sotopia(logs, path)
        elif fmt == "sotopia-public":
            from sotopia_env.episodes.sotopia_public import export_public

            logs = [log for log in logs if log.status == "rated"]
            export_public(logs, path)
        elif fmt == "hf":
            from sotopia_env.episodes.export import to_hf_dataset

            to_hf_dataset(logs).save_to_disk(str(path))
        else:
            raise ValueError(f"unknown format {fmt!r} (jsonl, sotopia, sotopia-public or hf)")
    console.print(f"exported {len(logs)} episodes to {path}")


@episodes_app.command("import")
def import_(
    path: Path = typer.Argument(
        ...,
        help="Our JSONL file; or, with --format sotopia, a directory in SOTOPIA's EpisodeLog + profiles layout, or "
        "SOTOPIA's public layout as a JSONL file, a JSON array file or a saved datasets directory.",
    ),
    tag: str = typer.Option(None, help="Re-tag the imported episodes."),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl (ours) or sotopia (either SOTOPIA layout, detected)."),
    store: str = Store,
) -> None:
    """Import episodes. Every record is validated before anything is written, so a bad file stores nothing."""
    with user_errors(ValueError, OSError):
        if fmt == "jsonl":
            from sotopia_env.episodes.export import import_jsonl

            logs = import_jsonl(path)
        elif fmt == "sotopia":
            from sotopia_env.episodes.sotopia_public import read_sotopia

            logs = read_sotopia(path)
        else:
            raise ValueError(f"unknown format {fmt!r} (jsonl or sotopia)")
    if not logs:
        raise fail(f"{path}: no episodes in it; nothing imported")
    for log in logs:
        if tag:
            log.tag = tag
    from sotopia_env.episodes.store import StoreError

    st = open_store_or_fail(store)
    with user_errors(StoreError):
        st.put_many(logs)
    console.print(f"imported {len(logs)} episodes into {st.url}")


@episodes_app.command("evaluate")
def evaluate(
    unrated: bool = typer.Option(
        True,
        "--unrated/--all",
        help="Only episodes without ratings (default). With --judge: rate only what each judge has not rated yet "
        "(missing, unrated, or rated under another prompt); --all rates everything again.",
    ),
    tag: str = typer.Option(None, help="Only this tag."),
    evaluator: str = typer.Option(None, "--evaluator", help="Model spec of the judge.", show_default=DEFAULT_MODEL),
    judge: list[str] = typer.Option(
        None,
        "--judge",
        help="Compare judges (repeatable; a model spec, as --evaluator takes): each rates the --tag's episodes, "
        "kept apart from their stored ratings, and their agreement per dimension is reported (Spearman rho, "
        "Krippendorff alpha, mean difference, with bootstrap intervals).",
    ),
    swap_seats: bool = typer.Option(
        False, "--swap-seats", help="With --judge: also rate with the seats in reverse order, to measure seat bias."
    ),
    resamples: int = typer.Option(1000, min=0, max=100_000, help="With --judge: bootstrap resamples."),
    json_out: Path = typer.Option(None, "--json", help="With --judge: also write the agreement report here."),
    dimensions: str = Dimensions,
    api_base: list[str] = ApiBase,
    concurrency: int = typer.Option(DEFAULT_CONCURRENCY, min=1, max=MAX_CONCURRENCY, help="Ratings in flight at once."),
    store: str = Store,
    store_retry_seconds: float = StoreRetry,
) -> None:
    """(Re)rate stored episodes; an episode whose rating fails again stays unrated with the new error.

    With --judge (and --tag): how far several judges agree, and (--swap-seats) whether each favours the seat it
    reads first. The episodes' own ratings are left as they are; each judge's ratings are kept in the store, so a
    rerun rates only what is not done. Each protocol card of that judge then shows its agreement figure."""
    from sotopia_env.episodes.preflight import PreflightFailed, check_services
    from sotopia_env.episodes.rate import rate_stored
    from sotopia_env.episodes.store import StoreError
    from sotopia_env.evaluators import make_evaluator

    if judge:
        if evaluator is not None:
            raise fail("give either --evaluator (rate the episodes in place) or --judge (compare judges), not both")
        base = model_servers(api_base)
        compare_judges(tag, judge, swap_seats, dimensions, base, not unrated, concurrency, store, resamples, json_out)
        return
    if swap_seats or json_out is not None:
        raise fail("--swap-seats and --json go with --judge")
    st = open_store_or_fail(store, writable=True)
    with user_errors(ValueError, OSError):
        judge_ = make_evaluator(evaluator or DEFAULT_MODEL, dimensions, model_servers(api_base))
    if judge_ is None:
        raise fail("--evaluator none cannot rate episodes")
    with user_errors(PreflightFailed):  # a wrong key or a dead server: one line, exit 1, nothing changed
        check_services([judge_])
    tune_gc_for_batch()
    with user_errors(StoreError):
        counts = asyncio.run(rate_stored(st, judge_, tag, unrated, concurrency, store_retry_seconds))
    console.print(f"rated {counts['rated']}, still unrated {counts['unrated']}")
    if counts["failed"]:
        raise fail(f"{counts['failed']} episodes were left as they were: the judge's model service failed")


def compare_judges(
    tag: str | None,
    specs: list[str],
    swap_seats: bool,
    dimensions: str,
    api_base: str | None,
    redo: bool,
    concurrency: int,
    store: str | None,
    resamples: int,
    json_out: Path | None,
) -> None:
    """``episodes evaluate --judge``: rate the tag's episodes with every judge, report and keep their agreement."""
    from sotopia_env.episodes.judge_agreement import agreement_report, card_figures, print_agreement, save_figures
    from sotopia_env.episodes.judge_ratings import judge_runs, rate_with_judges
    from sotopia_env.episodes.protocol import judge_sha256
    from sotopia_env.episodes.store import StoreError
    from sotopia_env.evaluators import make_evaluator

    if not tag:
        raise fail("--judge needs --tag: the episodes the judges rate")
    repeated = next((s for i, s in enumerate(specs) if s in specs[:i]), None)
    if repeated is not None:
        raise fail(f"--judge {repeated!r} is given twice")
    if len(specs) < 2 and not swap_seats:
        raise fail("one --judge has nothing to agree with: give a second --judge, or --swap-seats")
    check_output_file(json_out, "--json")
    st = open_store_or_fail(store, writable=True)
    with user_errors(StoreError):
        logs = [log for log in st.iter(tag) if log.status != "failed"]
    if not logs:
        raise fail(f"no episodes with tag {tag!r} to rate in {st.url} (failed ones have no transcript)")
    judges = {}
    for spec in specs:
        with user_errors(ValueError, OSError):
            made = make_evaluator(spec, dimensions, api_base)
        if made is None:
            raise fail(f"--judge {spec}: 'none' rates nothing")
        judges[spec] = made
    from sotopia_env.episodes.preflight import PreflightFailed, check_services

    with user_errors(PreflightFailed):  # a judge with a wrong key or a dead server: one line, nothing rated
        check_services(judges.values())
    runs, no_order = judge_runs(judges, swap_seats)
    tune_gc_for_batch()
    with user_errors(StoreError):
        outcome = asyncio.run(rate_with_judges(st, tag, logs, runs, redo, concurrency))
    console.print(
        f"rated {outcome.rated} now ({outcome.unrated} unrated), reused {outcome.reused} stored ratings, "
        f"{outcome.seconds:.1f} s"
    )
    started = time.perf_counter()
    report = agreement_report(tag, logs, outcome.ratings, specs, resamples, no_seat_order=no_order)
    print_agreement(report, console)
    console.print(f"figures computed in {time.perf_counter() - started:.1f} s")
    figures = card_figures(report, {label: (ev.name, judge_sha256(ev)) for label, ev in judges.items()})
    with user_errors(StoreError):
        save_figures(st, figures)
    if json_out:
        payload = report.model_dump(mode="json") | {"figures": [f.model_dump(mode="json") for f in figures]}
        json_out.write_text(json.dumps(payload, indent=2))
        console.print(f"wrote {json_out}")


def report(
    tag: str = typer.Option(..., "--tag", help="The tag to report on."),
    store: str = Store,
    json_out: Path = typer.Option(None, "--json", help="Also write the report as JSON here."),
    png: Path = typer.Option(None, "--png", help="Also draw a bar chart with 95% intervals here."),
    by_seat: bool = typer.Option(False, "--by-seat", help="Separate rows per seat (model@1, model@2)."),
) -> None:
    """Per model and dimension: mean, 95% t-interval and n; unrated and failed episodes counted, never as 0.
    Games also get each role's win rate, with a Wilson 95% interval. The protocol card (scenario set, judge and its
    prompt hash, dimensions, seeds, turns, version) is printed first, and stored in --json as "cards"."""
    from sotopia_env.cli.render import show_cards
    from sotopia_env.episodes.game_report import print_role_table, role_win_rates, with_roles
    from sotopia_env.episodes.judge_agreement import stored_figures
    from sotopia_env.episodes.report import build_report, plot_report, print_report

    check_output_file(json_out, "--json")
    check_output_file(png, "--png")
    st = open_store_or_fail(store)
    rep = build_report(st.iter(tag), tag=tag, group_by_seat=by_seat)
    if not rep.rows:
        raise fail(f"no episodes with tag {tag!r} in {st.url}")
    cards = show_cards(st.iter(tag), console, tag, stored_figures(st))
    print_report(rep, console)
    roles = role_win_rates(st.iter(tag))
    if roles:
        print_role_table(roles, console)
    if json_out:
        json_out.write_text(json.dumps(with_roles(rep.to_dict(), roles) | cards, indent=2))
        console.print(f"wrote {json_out}")
    if png:
        plot_report(rep, str(png))
        console.print(f"wrote {png}")
