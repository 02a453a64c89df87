"""Helpers shared by the RL benchmark scripts (not a benchmark itself): a trained stage's wall time and peak
memory, evaluations kept in a run folder and played again only where missing, paired intervals (a bootstrap over
instances; over training seeds and instances, a nested bootstrap beside a seed-level t-interval), and the rule that
a test split runs once, fully specified (settings, seeds, rows and code commit), and prints when every seed is in."""

from __future__ import annotations

import hashlib
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def timed(trainer) -> dict:
    """``trainer()``'s summary with its wall time and peak RSS (and GPU memory)."""
    import torch

    from sotopia_env.training.rss import peak_rss_mb, reset_peak_rss

    reset_peak_rss()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    summary = trainer()
    summary.update(seconds=round(time.perf_counter() - t0, 1), peak_rss_mb=peak_rss_mb())
    if torch.cuda.is_available():
        summary["note"] += f"; peak GPU memory {torch.cuda.max_memory_allocated() >> 20} MiB"
    return summary


def stage_kept(stages: dict[str, dict], key: str, folder: Path) -> bool:
    """A stage counts as trained when ``stages.json`` names it and its folder holds its model reference (written
    last): a record kept without its adapters (committed; adapters are not) or a training cut short trains again."""
    from sotopia_env.model_ref import MODEL_REF

    return key in stages and (folder / MODEL_REF).is_file()


def adapter_digest(folder: Path) -> str:
    """sha256 of a trained stage's weights (the ``*.safetensors`` of the adapter its model reference names): the
    same seed, settings and thread count should give the same digest, so a stage trained again can be checked
    against its kept record."""
    from sotopia_env.model_ref import read_model_ref

    _, adapter = read_model_ref(str(folder))
    digest = hashlib.sha256()
    for file in sorted(Path(adapter or folder).glob("*.safetensors")):
        digest.update(file.read_bytes())
    return digest.hexdigest()


def run_stage(stages: dict[str, dict], stages_file: Path, key: str, folder: Path, trainer, **extra) -> None:
    """Train one stage into ``folder`` unless it is kept (``trainer()`` returns its summary, ``extra`` is added to
    it) and keep every stage's summary in ``stages_file``. A stage whose record is kept without its adapter is
    trained again; its record keeps its first summary and says whether the weights came out the same."""
    if stage_kept(stages, key, folder):
        return
    summary = timed(trainer)
    summary.update(extra, adapter_sha256=adapter_digest(folder))
    kept = stages.get(key)
    if kept is None:
        stages[key] = summary
    else:
        same = summary["adapter_sha256"] == kept.get("adapter_sha256")
        kept.setdefault("retrained", []).append({k: v for k, v in summary.items() if k != "log"} | {"same": same})
        print(
            f"{key}: trained again (its adapter was not here): {'the same' if same else 'OTHER'} weights than the "
            "kept record's, whose evaluations stay",
            file=sys.stderr,
            flush=True,
        )
    stages_file.write_text(json.dumps(stages, indent=2))
    print(f"{key}: trained in {summary['seconds']:.0f} s", file=sys.stderr, flush=True)


def evaluate_kept(run: Path, name: str, evaluate_rows) -> list[dict]:
    """``evaluate_rows(done)`` with the rows kept in ``RUN/evals/NAME.json`` (played again only where missing),
    and the new ones kept there."""
    cached = run / "evals" / f"{name}.json"
    done = json.loads(cached.read_text()) if cached.is_file() else []
    t0 = time.perf_counter()
    rows = evaluate_rows(done)
    if len(rows) > len(done):
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(rows, indent=2))
        print(f"{name}: evaluated in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return rows


def paired_interval(
    rows: list[dict], reference: list[dict], greedy: bool, seed: int = 0, unit: str = "instance"
) -> tuple[float, float, float]:
    """Mean of (row - reference) goal per instance (over its seeds, paired by seed), and a 95% bootstrap interval
    over instances (2,000 resamples); ``unit="episode"`` resamples the (instance, seed) pairs instead."""

    def goals(data: list[dict]) -> dict[tuple[str, int], float]:
        return {(r["instance"], r["seed"]): r["goal"] for r in data if "goal" in r and r["greedy"] == greedy}

    mine, theirs = goals(rows), goals(reference)
    diffs: dict[object, list[float]] = {}
    for key in sorted(mine.keys() & theirs.keys()):  # sorted: the same resamples in every process
        diffs.setdefault(key[0] if unit == "instance" else key, []).append(mine[key] - theirs[key])
    values = [statistics.fmean(d) for d in diffs.values()]
    if not values:
        return float("nan"), float("nan"), float("nan")
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(2000))
    return statistics.fmean(values), means[49], means[1949]


def paired_cells(
    mine: dict[int | None, dict[str, float]], reference: dict[int | None, dict[str, float]]
) -> tuple[list, list[str], np.ndarray]:
    """The training seeds, the instances every seed has, and the (seed x instance) array of paired differences
    (mine - reference; a reference without seeds, ``None``, pairs with every seed)."""
    seeds = sorted(s for s in mine if s in reference or None in reference)
    ref = lambda s: reference.get(s, reference.get(None, {}))  # noqa: E731
    if not seeds:
        return [], [], np.empty((0, 0))
    instances = sorted(set.intersection(*(set(mine[s]) & set(ref(s)) for s in seeds)))
    diffs = np.array([[mine[s][i] - ref(s)[i] for i in instances] for s in seeds]).reshape(len(seeds), len(instances))
    return seeds, instances, diffs


def nested_interval(
    mine: dict[int | None, dict[str, float]],
    reference: dict[int | None, dict[str, float]],
    resamples: int = 4000,
    seed: int = 0,
) -> tuple[float, float, float, int, int]:
    """Mean paired difference (mine - reference, per training seed and instance) and a 95% nested bootstrap
    interval: each resample draws the training seeds with replacement, then, within each drawn seed, its instances
    with replacement; with the number of seeds and instances. With few seeds it is too narrow (3 seeds give 10
    distinct seed draws, and no draw leaves the seeds' range): read it beside ``seed_t_interval``."""
    seeds, instances, diffs = paired_cells(mine, reference)
    if not seeds or not instances:
        return float("nan"), float("nan"), float("nan"), 0, 0
    rng = np.random.default_rng(seed)
    n_seeds, n_instances = diffs.shape
    means = np.empty(resamples)
    for start in range(0, resamples, 1000):  # in blocks: (block, seeds, instances) index arrays stay small
        b = min(1000, resamples - start)
        rows = rng.integers(0, n_seeds, (b, n_seeds))
        cols = rng.integers(0, n_instances, (b, n_seeds, n_instances))
        means[start : start + b] = diffs[rows[:, :, None], cols].mean(axis=(1, 2))
    low, high = np.quantile(means, [0.025, 0.975])
    return float(diffs.mean()), float(low), float(high), n_seeds, n_instances


def seed_t_interval(
    mine: dict[int | None, dict[str, float]], reference: dict[int | None, dict[str, float]]
) -> tuple[float, float, float, int, int]:
    """Mean paired difference and a 95% t-interval over the training seeds: each seed's mean difference over the
    instances is one observation (n - 1 degrees of freedom; 3 seeds: t = 4.30). It holds its level however few
    seeds there are (for these instances: instance variance enters only through each seed's mean); nan for one
    seed."""
    from scipy import stats

    seeds, instances, diffs = paired_cells(mine, reference)
    if not seeds or not instances:
        return float("nan"), float("nan"), float("nan"), 0, 0
    per_seed = diffs.mean(axis=1)
    mean = float(per_seed.mean())
    if len(per_seed) < 2:
        return mean, float("nan"), float("nan"), len(seeds), len(instances)
    half = float(stats.t.ppf(0.975, len(per_seed) - 1) * per_seed.std(ddof=1) / np.sqrt(len(per_seed)))
    return mean, mean - half, mean + half, len(seeds), len(instances)


def both_intervals(
    mine: dict[int | None, dict[str, float]], reference: dict[int | None, dict[str, float]], resamples: int = 4000
) -> tuple[tuple[float, float, float, int, int], tuple[float, float, float, int, int]]:
    """``nested_interval`` and ``seed_t_interval`` of the same cells: what every RL benchmark's table prints."""
    return nested_interval(mine, reference, resamples), seed_t_interval(mine, reference)


INTERVALS = "95% nested; seed t"  # the table headers' name for ``fmt_diff``'s two intervals


def fmt_diff(result) -> str:
    """``mean [nested bootstrap]; t [seed t-interval] (seeds x instances)`` from ``both_intervals``, or one
    interval's ``mean [low, high] (seeds x instances)``."""
    if len(result) == 2:
        (mean, low, high, n_seeds, n_instances), (_, t_low, t_high, _, _) = result
        if mean != mean:
            return "-"
        t = "-" if t_low != t_low else f"[{t_low:+.2f}, {t_high:+.2f}]"
        return f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]; t {t} ({n_seeds}x{n_instances})"
    mean, low, high, n_seeds, n_instances = result
    return "-" if mean != mean else f"{mean:+.2f} [{low:+.2f}, {high:+.2f}] ({n_seeds}x{n_instances})"


def code_commit() -> str:
    """The checkout's commit (HEAD's sha), with ``+dirty`` when a tracked file outside ``benchmarks/runs`` differs
    from it; ``unknown`` outside a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)benchmarks/runs"],
            cwd=root, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if changed else "")


GUARD_FILE = "test_settings.json"


def guard_test_once(
    folder: Path | None,
    settings: dict,
    rows: Sequence[str],
    final: bool,
    seeds: Sequence[int | None],
    commit: str | None = None,
) -> str | None:
    """A test split runs once, at the end, fully specified: only with ``--final`` and a run folder, where its first
    run keeps its settings, training seeds, rows and code commit (``commit``, else ``code_commit()``; a new test
    run needs a clean checkout). A later run must give the same settings, the same seeds and the same rows (the
    whole set, not a part of it: a row added or dropped after a test table was read is the selection the protocol
    forbids), else it is refused. Returns None where the run may play test episodes (the same commit), else why
    it may not: a run at another commit, or under a legacy guard (one written before seeds and commit were kept),
    may only reprint what is recorded, and a caller refuses to play anything there. Choices are made on dev."""
    if not final:
        raise SystemExit(
            "--split test runs once, for the final rows: make every choice on --split dev, then add --final"
        )
    if folder is None:
        raise SystemExit("--split test keeps its settings in the run folder: give one (--keep or --out RUN)")
    guard = folder / GUARD_FILE
    commit = code_commit() if commit is None else commit
    mine = {"settings": settings, "seeds": sorted(seeds, key=str), "rows": sorted(rows), "commit": commit}
    if not guard.is_file():
        if commit == "unknown" or commit.endswith("+dirty"):
            raise SystemExit(
                f"--split test records the code commit it runs at, and this checkout's is {commit!r}: run the test "
                "split from a clean git checkout (a frozen worktree), so that its figures name the code behind them"
            )
        folder.mkdir(parents=True, exist_ok=True)
        guard.write_text(json.dumps(mine, indent=2))
        return None
    kept = json.loads(guard.read_text())
    legacy = "seeds" not in kept or "commit" not in kept
    differs = [key for key in ("settings", "rows") + (() if legacy else ("seeds",)) if kept.get(key) != mine[key]]
    if differs:
        raise SystemExit(
            f"{guard}: test was already run under other {' and '.join(differs)} ({kept}); test runs once, with "
            "the settings, seeds and rows it first ran with: make choices on dev"
        )
    if legacy:
        return (
            f"{guard} is a legacy test record (kept before the guard recorded training seeds and code commit): "
            "it reprints what it holds, and nothing more is played on test under it"
        )
    if kept["commit"] != commit:
        return (
            f"{guard}: test ran at commit {kept['commit']}, this checkout is {commit}: the record reprints, and no "
            "test episode is played at another commit"
        )
    return None


def seeds_missing(evals: dict[str, dict], seeds: Sequence[int]) -> list[str]:
    """``row seed S`` for every trained row (one with training seeds: not ``None``-keyed alone) lacking a training
    seed's evaluations: a test table is printed only when this is empty, when every seed is in."""
    missing = []
    for row, by_seed in evals.items():
        if set(by_seed) == {None}:
            continue
        missing += [f"{row} seed {s}" for s in seeds if not by_seed.get(s)]
    return missing
