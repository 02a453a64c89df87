"""Self-reinforcement (SOTOPIA-pi, stage 2), one round: the policy plays itself and learns from its best.

1. The current policy (a trained model dir, or the base model) takes both seats,
   ``episodes_per_scenario`` times on each training scenario (served by an inference server with
   ``policy_server``, see ``training.policy_server``); the evaluator rates every episode. Resumable: done
   episodes are skipped.
2. The rated episodes pass the filters and become one example per turn.
3. Training continues from the policy: its LoRA adapter is loaded trainable on
   top of the base model (or, for a full fine-tune, its weights are the start).
   If no example passed the filters, the policy is kept unchanged.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from sotopia_env.episodes.jobs import self_play_jobs
from sotopia_env.model_ref import MODEL_REF, read_model_ref
from sotopia_env.training.context import StageContext, StageResult, batch_counts
from sotopia_env.training.dataset import build_dataset
from sotopia_env.training.sft import train_sft
from sotopia_env.training.stages import stage_name


def run_sr_round(ctx: StageContext, round_: int, policy: str) -> StageResult:
    c = ctx.config
    name = stage_name(round_)
    out = (c.out / name).resolve()
    tag = ctx.tag(name)

    # 1. self-play, rated
    scenarios = ctx.scenarios("sr.scenarios", c.sr.scenarios)
    jobs = self_play_jobs(scenarios, ctx.library, policy, c.sr.episodes_per_scenario, c.seed + round_)
    summary = ctx.run_jobs(jobs, tag, policy=policy)

    # 2. the filtered dataset
    keys = {job.key for job in jobs}
    logs = [log for log in ctx.store.iter(tag) if log.combo_key in keys]
    filters = c.sr.filter.build(c.seed + round_)
    dataset, stats = ctx.shared_dataset(out / "dataset.jsonl", lambda: build_dataset(logs, *filters, config=c.env))
    result = StageResult(name=name, model=policy, tag=tag, episodes=batch_counts(summary), dataset=stats)
    if len(dataset) == 0:
        result.note = "no example passed the filters; the policy is unchanged"
        return result

    # 3. keep training the policy
    if c.train.full_finetune or not (Path(policy) / MODEL_REF).is_file():
        start = {"base_model": policy, "init_adapter": None}  # full weights, or a fresh LoRA on an untrained model
    else:
        base, adapter = read_model_ref(policy)
        start = {"base_model": base, "init_adapter": adapter}
    trained = train_sft(
        dataset, c.train_config("sr", c.sr.train, output_dir=str(out), progress=ctx.train_progress, **start)
    )
    result.model = trained.model_dir
    result.train = asdict(trained)
    return result
