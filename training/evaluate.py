"""Evaluation after every stage: the policy against a fixed partner on held-out scenarios, in both seats.

Every stage plays the same setups (same seed), so the stages are compared on
the same episodes' starting points. ``stage_report`` puts every stage in one
benchmark report, one row per stage (base, bc, sr1, ...), with 95% t-intervals.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sotopia_env.episodes.jobs import versus_jobs
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.report import Report, build_report
from sotopia_env.episodes.store import EpisodeStore
from sotopia_env.training.context import StageContext, StageResult, batch_counts


def eval_name(stage: str) -> str:
    return f"eval-{stage}"


def run_eval(ctx: StageContext, stage: str, policy: str) -> StageResult:
    """Play ``policy`` against the partner on the held-out scenarios (resumable), rated."""
    c = ctx.config
    name = eval_name(stage)
    scenarios = ctx.scenarios("eval.scenarios", c.eval.scenarios, held_out=True)
    jobs = versus_jobs(scenarios, ctx.library, policy, c.eval.partner, c.eval.episodes_per_scenario, c.seed)
    summary = ctx.run_jobs(jobs, ctx.tag(name), policy=policy)
    return StageResult(name=name, model=policy, tag=ctx.tag(name), episodes=batch_counts(summary))


def relabel(log: EpisodeLog, policy: str, label: str) -> EpisodeLog:
    """The log with the policy's seats named ``label`` and the others ``partner:<model>``."""
    agents = [a.model_copy(update={"model": label if a.model == policy else f"partner:{a.model}"}) for a in log.agents]
    return log.model_copy(update={"agents": agents})


def stage_report(store: EpisodeStore, stages: Sequence[tuple[str, str, str]]) -> Report:
    """One row per ``(label, policy spec, eval tag)``, in the given order; partners are left out."""

    def logs() -> Iterable[EpisodeLog]:
        for label, policy, tag in stages:
            for log in store.iter(tag):
                yield relabel(log, policy, label)

    report = build_report(logs(), tag="stages")
    rows = {row.model: row for row in report.rows}
    report.rows = [rows[label] for label, _, _ in stages if label in rows]
    return report
