"""``sotopia-env scenarios generate`` and ``sotopia-env characters generate``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from sotopia_env.cli.common import console, fail, user_errors
from sotopia_env.cli.options import ApiBase, ScenariosDir, model_servers
from sotopia_env.limits import DEFAULT_CONCURRENCY
from sotopia_env.specs import DEFAULT_MODEL

if TYPE_CHECKING:
    from sotopia_env.backends.base import Backend
    from sotopia_env.backends.endpoints import ModelServers
    from sotopia_env.generation.core import GenerationStats, OnOutcome, OnStart, Outcome, RunSettings
    from sotopia_env.library import Library

Model = typer.Option(DEFAULT_MODEL, "--model", help="Model spec: an alias, a hub id, or a litellm model string.")
Count = typer.Option(10, "--n", min=0, max=100_000, help="How many items to generate (scenarios: fresh seeds to use).")
Out = typer.Option(..., "--out", help="Directory the YAML files (one per item) are written to.")
Seed = typer.Option(0, "--seed", help="Seeds example choice, attribute sampling and generation.")
Concurrency = typer.Option(DEFAULT_CONCURRENCY, "--concurrency", min=1, max=4096, help="Generations in flight at once.")
Attempts = typer.Option(3, "--attempts", min=1, max=100, help="Tries per item before it is skipped as failed.")
MaxNewTokens = typer.Option(700, "--max-new-tokens", min=16, help="Token limit of each reply.")
Temperature = typer.Option(0.9, "--temperature", min=0.0, help="Sampling temperature.")


def _settings(seed: int, concurrency: int, attempts: int, max_new_tokens: int, temperature: float) -> RunSettings:
    from sotopia_env.generation.core import RunSettings

    return RunSettings(
        attempts=attempts,
        concurrency=concurrency,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )


def _reference_library(out: Path, extra: list[Path] | None) -> Library:
    """The built-in library, the extra dirs, and what ``out`` already holds (each path once)."""
    from sotopia_env.library import LibraryError, load_library

    if out.exists() and not out.is_dir():
        raise fail(f"--out {out}: is a file; give a folder (new or existing) for the YAML files")
    paths: dict[Path, Path] = {}
    for path in [*(extra or []), out]:
        if path.exists():
            paths.setdefault(path.resolve(), path)
    with user_errors(LibraryError, OSError):
        return load_library(list(paths.values()))


def _backend(model: str, api_base: ModelServers | None) -> Backend:
    from sotopia_env.backends.resolve import resolve_backend
    from sotopia_env.embedded_models import ModelUnavailable

    with user_errors(ValueError, OSError, ModelUnavailable, ImportError):
        return resolve_backend(model, api_base=api_base)


@contextlib.contextmanager
def _progress(what: str) -> Iterator[tuple[OnStart, OnOutcome]]:
    """Callbacks that drive a rich progress bar counting generated / duplicate / failed items."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    counts = {"generated": 0, "duplicate": 0, "failed": 0}
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn(
            "[green]{task.fields[generated]} ok[/] {task.fields[duplicate]} dup [red]{task.fields[failed]} failed[/]"
        ),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(f"generating {what}", total=None, generated=0, duplicate=0, failed=0)

        def on_start(total: int) -> None:
            bar.update(task, total=total)

        def on_outcome(outcome: Outcome) -> None:
            counts[outcome.status] += 1
            bar.update(
                task, advance=1, generated=counts["generated"], duplicate=counts["duplicate"], failed=counts["failed"]
            )

        yield on_start, on_outcome


def _report(stats: GenerationStats, what: str, out: Path) -> None:
    s = stats.summary()
    parts = [f"generated {s['generated']}", f"rejected as duplicates {s['duplicates']}", f"failed {s['failed']}"]
    if what == "scenarios":
        parts.append(f"skipped as reused seeds {s['reused_seeds']}")
        parts.append(f"repeated seeds dropped {s['repeated_seeds']}")
    parts.append(f"retries {s['retries']}")
    console.print(f"{what}: " + ", ".join(parts), highlight=False, soft_wrap=True)
    for error in stats.errors[:5]:
        console.print(f"  [dim]failed: {error}[/]", highlight=False, soft_wrap=True)
    if stats.generated:
        console.print(
            f"wrote {stats.generated} file(s) to {out}; use them with --scenarios-dir {out}",
            highlight=False,
            soft_wrap=True,
        )


def generate_scenarios_cmd(
    seeds_path: Path = typer.Option(..., "--from", help="JSONL, CSV or text file of seed situations."),
    model: str = Model,
    n: int = Count,
    out: Path = Out,
    seed: int = Seed,
    column: str = typer.Option("context", "--column", help="The seed text's field (JSONL) or column (CSV)."),
    api_base: list[str] = ApiBase,
    split: str = typer.Option("train", "--split", help="Split of the new scenarios: train or dev (never test)."),
    examples: int = typer.Option(2, "--examples", min=1, max=2, help="Library scenarios shown as examples."),
    concurrency: int = Concurrency,
    attempts: int = Attempts,
    max_new_tokens: int = MaxNewTokens,
    temperature: float = Temperature,
    scenarios_dir: list[Path] = ScenariosDir,
) -> None:
    """Generate scenarios from seed situations (e.g. Social IQa contexts), SOTOPIA-π style.

    Each fresh seed becomes one scenario with two goals in tension, validated and written as YAML under --out.

    Skipped: repeated seeds, seeds used by an earlier run (--out/.used_seeds.jsonl), and near-copies of known
    scenarios (Jaccard similarity of word 3-shingles >= 0.5). Failed generations are retried, then counted.
    """
    from sotopia_env.generation.scenarios import ALLOWED_SPLITS, generate_scenarios
    from sotopia_env.generation.seeds import SeedFileError, read_seeds

    if split not in ALLOWED_SPLITS:
        raise fail(f"--split {split!r}: generated scenarios never go into the test split; use train or dev")
    with user_errors(SeedFileError):
        seeds = read_seeds(seeds_path, column)
    if not seeds:
        raise fail(f"--from {seeds_path}: no seed situations in the file")
    lib = _reference_library(out, scenarios_dir)
    backend = _backend(model, model_servers(api_base))
    settings = _settings(seed, concurrency, attempts, max_new_tokens, temperature)
    with _progress("scenarios") as (on_start, on_outcome), user_errors(SeedFileError, OSError):
        stats = asyncio.run(
            generate_scenarios(
                backend,
                seeds,
                n,
                out,
                lib,
                split=split,
                examples=examples,
                settings=settings,
                on_start=on_start,
                on_outcome=on_outcome,
            )
        )
    _report(stats, "scenarios", out)


def generate_characters_cmd(
    model: str = Model,
    n: int = Count,
    out: Path = Out,
    seed: int = Seed,
    api_base: list[str] = ApiBase,
    concurrency: int = Concurrency,
    attempts: int = Attempts,
    max_new_tokens: int = MaxNewTokens,
    temperature: float = Temperature,
    scenarios_dir: list[Path] = ScenariosDir,
) -> None:
    """Generate new characters, varied by sampled age band, gender, occupation field, traits and secret theme.

    Each is validated and written as YAML under --out; taken names and near-copies of known characters are rejected.

    Generated characters have no relationships, so they take seats in stranger scenarios.
    """
    from sotopia_env.generation.characters import generate_characters

    lib = _reference_library(out, scenarios_dir)
    backend = _backend(model, model_servers(api_base))
    settings = _settings(seed, concurrency, attempts, max_new_tokens, temperature)
    with _progress("characters") as (on_start, on_outcome), user_errors(OSError):
        stats = asyncio.run(
            generate_characters(backend, n, out, lib, settings=settings, on_start=on_start, on_outcome=on_outcome)
        )
    _report(stats, "characters", out)
