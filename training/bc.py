"""Behaviour cloning (SOTOPIA-pi, stage 1): the expert plays itself, the best episodes are trained on.

1. The expert (any agent spec: an API model, a local model, ``module:Class``)
   takes both seats, ``episodes_per_scenario`` times on each training scenario
   (with ``bc.partner``: one seat, against the partner, as ``benchmark`` pairs them);
   the evaluator rates every episode. Resumable: done episodes are skipped.
2. The rated episodes pass the filters (by default SOTOPIA-pi's best episode per
   scenario and role; only the expert's seats when it had a partner) and become one
   example per turn.
3. A LoRA (or full fine-tune) of the base model is trained on them.

With ``bc.source``, step 1 reads existing expert episodes instead (a store tag or an imported file, see
``training.sources``): no expert model and no judge are needed.
"""

from __future__ import annotations

from dataclasses import asdict

from sotopia_env.episodes.jobs import self_play_jobs, versus_jobs
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.training.context import StageContext, StageResult, batch_counts
from sotopia_env.training.dataset import build_dataset, played_by
from sotopia_env.training.sft import train_sft
from sotopia_env.training.sources import keep_unrated, read_source, status_counts, with_library_splits

STAGE = "bc"


def expert_episodes(ctx: StageContext) -> tuple[list[EpisodeLog], str, dict[str, int]]:
    """(episodes, their tag, their counts): generated and rated now, or read from ``bc.source``."""
    c = ctx.config
    if c.bc.source is not None:
        logs = read_source(c.bc.source, ctx.store, f"{c.source}: field 'bc.source'")
        return with_library_splits(logs, ctx.library), c.bc.source.tag or "", status_counts(logs)
    tag = ctx.tag(STAGE)
    scenarios = ctx.scenarios("bc.scenarios", c.bc.scenarios)
    if c.bc.partner:
        from sotopia_env.agents.rule_specs import check_rule_specs

        check_rule_specs(scenarios, [c.bc.expert, c.bc.partner], c.evaluator.model)  # one line if misplaced
        jobs = versus_jobs(scenarios, ctx.library, c.bc.expert, c.bc.partner, c.bc.episodes_per_scenario, c.seed)
    else:
        jobs = self_play_jobs(scenarios, ctx.library, c.bc.expert, c.bc.episodes_per_scenario, c.seed)
    summary = ctx.run_jobs(jobs, tag)
    keys = {job.key for job in jobs}  # only this config's episodes, if the tag holds others
    return [log for log in ctx.store.iter(tag) if log.combo_key in keys], tag, batch_counts(summary)


def run_bc(ctx: StageContext) -> StageResult:
    c = ctx.config
    out = (c.out / STAGE).resolve()

    # 1. expert episodes, rated (or as the source has them)
    logs, tag, counts = expert_episodes(ctx)

    # 2. the filtered dataset
    unrated = c.bc.source is not None and keep_unrated(logs, c.bc.filter, f"{c.source}: field 'bc.source'")
    sample_filters, example_filters = c.bc.filter.build(c.seed)
    if c.bc.partner and c.bc.source is None:
        sample_filters = [played_by(c.bc.expert), *sample_filters]
    dataset, summary = ctx.shared_dataset(
        out / "dataset.jsonl",
        lambda: build_dataset(logs, sample_filters, example_filters, config=c.env, keep_unrated=unrated),
    )

    # 3. train the base model on it
    result = train_sft(
        dataset,
        c.train_config("bc", c.bc.train, base_model=c.base_model, output_dir=str(out), progress=ctx.train_progress),
    )
    return StageResult(
        name=STAGE,
        model=result.model_dir,
        tag=tag,
        episodes=counts,
        dataset=summary,
        train=asdict(result),
    )
