"""The SOTOPIA-pi loop from one config: evaluate the base, BC, evaluate, then SR rounds, then RL, each evaluated.

Stages run in this order (``plan``): ``eval-base``, ``bc``, ``eval-bc``, ``sr1``,
``eval-sr1``, ..., and with an ``rl:`` section ``rl``, ``eval-rl`` (GRPO from the last policy).
Everything lives under the config's ``output_dir``:

- ``episodes.db``: every stage's episodes (SQLite, unless ``store`` says otherwise);
- ``bc/``, ``sr1/``, ..., ``rl/``: each trained model (a model spec), its dataset and checkpoints;
- ``state.json``: each finished stage with its result and ``finished_at``;
- ``report.json`` / ``report.png``: every stage's evaluation in one table.

A rerun skips finished stages and resumes the first unfinished one: its
episodes already stored are skipped and training resumes from its last checkpoint.

Under ``accelerate launch`` (several processes, ``training.distributed``) every rank runs the stages: the main
process plays the episodes and writes the store and every file; the other ranks wait for it, load the
datasets it wrote, and train with it (DDP, DeepSpeed or FSDP).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sotopia_env.episodes.report import Report
from sotopia_env.training.bc import run_bc
from sotopia_env.training.config import PipelineConfig
from sotopia_env.training.context import StageContext, StageResult
from sotopia_env.training.distributed import is_main_process
from sotopia_env.training.evaluate import eval_name, run_eval, stage_report
from sotopia_env.training.rl_stage import run_rl
from sotopia_env.training.rss import keep_heap_small
from sotopia_env.training.sr import run_sr_round
from sotopia_env.training.stages import trained_stages

STATE_FILE = "state.json"


class StageOrderError(RuntimeError):
    """A stage was asked for before the stage it builds on finished."""


@dataclass
class PipelineState:
    """``state.json``: finished stages by name, each with ``finished_at`` and its result."""

    path: Path
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, out: Path) -> PipelineState:
        path = out / STATE_FILE
        if not path.is_file():
            return cls(path)
        data = json.loads(path.read_text())
        return cls(path, dict(data.get("stages", {})))

    def done(self, name: str) -> bool:
        return name in self.stages

    def mark(self, result: StageResult) -> None:
        self.stages[result.name] = {**result.to_dict(), "finished_at": datetime.now(timezone.utc).isoformat()}
        self.save()

    def save(self) -> None:
        """Written by the main process; the other ranks of a multi-process run keep it in memory only."""
        if not is_main_process():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"stages": self.stages}, indent=2))
        os.replace(tmp, self.path)


def plan(config: PipelineConfig) -> list[str]:
    """Every stage in order: each trained stage (not ``base``) followed by its evaluation."""
    out = []
    for stage in trained_stages(config):
        if stage != "base":
            out.append(stage)
        if config.eval.enabled:
            out.append(eval_name(stage))
    return out


def policy_of(stage: str, config: PipelineConfig, state: PipelineState) -> str:
    """The model spec a trained stage produced (``base`` is the base model)."""
    if stage == "base":
        return config.base_model
    if not state.done(stage):
        raise StageOrderError(f"stage {stage!r} has not finished yet; run it first")
    return str(state.stages[stage]["model"])


def run_stage(ctx: StageContext, name: str, state: PipelineState) -> StageResult:
    config = ctx.config
    stages = trained_stages(config)
    if name.startswith("eval-"):
        stage = name.removeprefix("eval-")
        return run_eval(ctx, stage, policy_of(stage, config, state))
    if name == "bc":
        return run_bc(ctx)
    previous = policy_of(stages[stages.index(name) - 1], config, state)
    if name == "rl":
        return run_rl(ctx, previous)
    return run_sr_round(ctx, int(name.removeprefix("sr")), previous)


def run_stages(
    config: PipelineConfig, only: Iterable[str] | None = None, force: bool = False, progress: bool = True
) -> tuple[PipelineState, Report]:
    """Run the stages of ``plan`` (or just ``only``) not finished yet (all of them with ``force``)."""
    wanted = plan(config)
    if only is not None:
        only = list(only)
        unknown = [n for n in only if n not in wanted]
        if unknown:
            raise StageOrderError(f"unknown stage {unknown[0]!r} for this config (stages: {', '.join(wanted)})")
        wanted = [n for n in wanted if n in only]
    keep_heap_small()  # what a stage's models and activations free leaves the RSS (training.rss)
    ctx = StageContext.open(config, progress)
    try:
        state = PipelineState.load(config.out)
        if is_main_process():
            (config.out / "config.json").write_text(json.dumps(_jsonable(config), indent=2))
        for name in wanted:
            if state.done(name) and not force:
                continue
            state.mark(run_stage(ctx, name, state))
        return state, write_report(ctx, state)
    finally:
        ctx.store.close()


def run_pipeline(config: PipelineConfig, progress: bool = True) -> tuple[PipelineState, Report]:
    """Every stage, resuming at the first unfinished one."""
    return run_stages(config, progress=progress)


def write_report(ctx: StageContext, state: PipelineState) -> Report:
    """Every evaluated stage in one report (``report.json``, ``report.png``)."""
    from sotopia_env.episodes.report import plot_report

    rows = []
    for stage in trained_stages(ctx.config):
        name = eval_name(stage)
        if state.done(name):
            rows.append((stage, str(state.stages[name]["model"]), str(state.stages[name]["tag"])))
    report = stage_report(ctx.store, rows)
    if not is_main_process():
        return report
    out = ctx.config.out
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=2))
    if report.rows and report.dimensions:
        plot_report(report, str(out / "report.png"))
    return report


def _jsonable(value: Any) -> Any:
    import dataclasses

    if hasattr(value, "model_dump"):  # a pydantic value (the model servers)
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
