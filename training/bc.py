"""Behaviour cloning (SOTOPIA-pi, stage 1): the expert plays itself, the best episodes are trained on.

1. The expert (any agent spec: an API model, a local model, ``module:Class``)
   takes both seats, ``episodes_per_scenario`` times on each training scenario;
   the evaluator rates every episode. Resumable: done episodes are skipped.
2. The rated episodes pass the filters (by default SOTOPIA-pi's best episode per
   scenario and role) and become one example per turn.
3. A LoRA (or full fine-tune) of the base model is trained on them.
"""

from __future__ import annotations

from dataclasses import asdict

from episodes.jobs import self_play_jobs
from training.context import StageContext, StageResult, batch_counts
from training.dataset import build_dataset
from training.trainer import train

STAGE = "bc"


def run_bc(ctx: StageContext) -> StageResult:
    c = ctx.config
    out = (c.out / STAGE).resolve()
    tag = ctx.tag(STAGE)

    # 1. expert episodes, rated
    scenarios = ctx.scenarios("bc.scenarios", c.bc.scenarios)
    jobs = self_play_jobs(scenarios, ctx.library, c.bc.expert, c.bc.episodes_per_scenario, c.seed)
    summary = ctx.run_jobs(jobs, tag)

    # 2. the filtered dataset (only this config's episodes, if the tag holds others)
    keys = {job.key for job in jobs}
    logs = [log for log in ctx.store.iter(tag) if log.combo_key in keys]
    dataset, stats = build_dataset(logs, *c.bc.filter.build(c.seed), config=c.env)
    out.mkdir(parents=True, exist_ok=True)
    dataset.to_json(str(out / "dataset.jsonl"))

    # 3. train the base model on it
    result = train(
        dataset,
        c.train_config("bc", c.bc.train, base_model=c.base_model, output_dir=str(out), progress=ctx.train_progress),
    )
    return StageResult(
        name=STAGE,
        model=result.model_dir,
        tag=tag,
        episodes=batch_counts(summary),
        dataset=stats.summary(),
        train=asdict(result),
    )
