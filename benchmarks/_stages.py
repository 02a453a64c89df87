"""Helpers shared by the RL benchmark scripts (not a benchmark itself): a trained stage's wall time and peak
memory, evaluations kept in a run folder and played again only where missing, paired bootstrap intervals (over
instances; hierarchical over training seeds and instances), and the rule that a test split runs once."""

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


def hierarchical_interval(
    mine: dict[int | None, dict[str, float]], reference: dict[int | None, dict[str, float]], resamples: int = 4000
) -> tuple[float, float, float, int, int]:
    """Mean paired difference (mine - reference, per training seed and instance; a reference without seeds pairs
    with every seed) and a 95% bootstrap interval resampling training seeds and instances (crossed); with the
    number of seeds and instances."""
    seeds = sorted(s for s in mine if s in reference or None in reference)
    instances = sorted(
        set.intersection(*(set(mine[s]) & set(reference.get(s, reference.get(None, {}))) for s in seeds))
    )
    if not seeds or not instances:
        return float("nan"), float("nan"), float("nan"), 0, 0
    diffs = np.array([[mine[s][i] - reference.get(s, reference.get(None, {}))[i] for i in instances] for s in seeds])
    rng = np.random.default_rng(0)
    means = np.empty(resamples)
    for b in range(resamples):
        rows = rng.integers(0, len(seeds), len(seeds))
        cols = rng.integers(0, len(instances), len(instances))
        means[b] = diffs[np.ix_(rows, cols)].mean()
    low, high = np.quantile(means, [0.025, 0.975])
    return float(diffs.mean()), float(low), float(high), len(seeds), len(instances)


def fmt_diff(result: tuple[float, float, float, int, int]) -> str:
    mean, low, high, n_seeds, n_instances = result
    return "-" if mean != mean else f"{mean:+.2f} [{low:+.2f}, {high:+.2f}] ({n_seeds}x{n_instances})"


def guard_test_once(folder: Path | None, settings: dict, rows: Sequence[str], final: bool) -> None:
    """A test split runs once, at the end: only with ``--final`` and a run folder, where the settings (and rows)
    of its first run are kept; a later run under other settings, or with a row not run then, is refused. Choices
    are made on dev."""
    if not final:
        raise SystemExit(
            "--split test runs once, for the final rows: make every choice on --split dev, then add --final"
        )
    if folder is None:
        raise SystemExit("--split test keeps its settings in the run folder: give one (--keep or --out RUN)")
    guard = folder / "test_settings.json"
    mine = {"settings": settings, "rows": sorted(rows)}
    if guard.is_file():
        kept = json.loads(guard.read_text())
        if kept["settings"] != mine["settings"] or not set(mine["rows"]) <= set(kept["rows"]):
            raise SystemExit(
                f"{guard}: test was already run under other settings or rows ({kept}); test runs once, "
                "make choices on dev"
            )
    else:
        folder.mkdir(parents=True, exist_ok=True)
        guard.write_text(json.dumps(mine, indent=2))
