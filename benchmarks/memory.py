"""Where training's memory goes: the peak RSS of every stage and trainer, each in a process of its own (issue #46).

    python benchmarks/memory.py                          # every stage below, then the whole pipeline
    python benchmarks/memory.py --stages bc,grpo --keep /tmp/mem
    python benchmarks/memory.py --quick                  # the expert's episodes and the dataset only (no model)

The stages are those of ``examples/pipeline-cpu.yaml`` (SmolLM2-135M, LoRA r 8, batch 2, max_length 1024), in
order, each resuming what the one before left in the run directory:

- ``episodes``: the BC expert's episodes (the scripted expert, the rule-based judge), stored;
- ``dataset``: BC's filtered chat dataset from them;
- ``eval-base``, ``bc``, ``eval-bc``, ``sr1``, ``eval-sr1``: the pipeline's stages, run as ``train pipeline``
  runs them (``run_stages(config, only=[stage])``): BC and SR train 20 and 10 steps, SR plays itself first;
- ``grpo``: text GRPO on TRL (``examples/grpo-socialiqa-cpu.yaml``), ``--rl-steps`` steps;
- ``episode-grpo``: GRPO on whole episodes (``examples/grpo-episodes-cpu.yaml``), ``--rl-steps`` steps, with
  ``dense_reward: 2`` so that the base model's groups differ and the update runs;
- ``pipeline``: ``sotopia-env train pipeline`` on the stock config, as a user runs it: the figure #46 asks for.

Per stage: the process's peak RSS (``wait4``'s ``ru_maxrss``, what ``/usr/bin/time -v`` reports), and for a
trainer the peak before its first step (playing, the dataset, loading), over its steps (the first, and the most
of the others) and after them (saving); and, over the first step, the peak of the bytes held by live torch
tensors with the largest of them at that peak (``_tensor_peak.py``; PyTorch's allocator statistics exist on
CUDA only); for an evaluation stage, what its local backends hold at the RSS peak (``PlayingPeak``: weights,
keys and values, prefix caches). RSS peaks do not depend on the load of the machine; the times do.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, machine_line, print_table

PIPELINE_STAGES = ["eval-base", "bc", "eval-bc", "sr1", "eval-sr1"]
STAGES = ["episodes", "dataset", *PIPELINE_STAGES, "grpo", "episode-grpo", "pipeline"]
QUICK_STAGES = ["episodes", "dataset"]
PIPELINE_YAML = ROOT / "examples" / "pipeline-cpu.yaml"
TEXT_GRPO_YAML = ROOT / "examples" / "grpo-socialiqa-cpu.yaml"
EPISODE_GRPO_YAML = ROOT / "examples" / "grpo-episodes-cpu.yaml"
MIB = 1024 * 1024


# -- the child: one stage, its phases written to WORK/STAGE.json ----------------------------------------


class Phases:
    """Peak RSS per phase of a trainer, read from hooks on TRL's ``Trainer`` or on episode GRPO's update.

    Resetting the kernel's high-water mark (``training.rss.reset_peak_rss``, as each phase and episode GRPO's
    steps do) also resets what ``wait4`` reports at exit, so every reset in this process first folds the peak so
    far into ``process_peak``: the stage's peak is the larger of the two."""

    def __init__(self) -> None:
        from sotopia_env.training import rss

        self.report: dict[str, Any] = {"steps": []}
        self.tensors = None
        self.process_peak = 0.0
        reset = rss.reset_peak_rss

        def folding_reset() -> bool:
            peak = rss.peak_rss_mb()
            self.report.setdefault("first_reset_mb", peak)  # episode GRPO: the peak before its first step
            self.process_peak = max(self.process_peak, peak)
            return reset()

        rss.reset_peak_rss = folding_reset  # before a trainer imports it by name

    def finish(self) -> dict[str, Any]:
        from sotopia_env.training.rss import peak_rss_mb

        self.report["process_peak_mb"] = max(self.process_peak, peak_rss_mb())
        return self.report

    def mark(self, name: str) -> None:
        from sotopia_env.training import rss

        self.report[name] = rss.peak_rss_mb()
        rss.reset_peak_rss()

    def start_tensors(self, model: Any) -> None:
        from _tensor_peak import LiveTensorPeak

        self.tensors = LiveTensorPeak()
        self.tensors.track([*model.parameters(), *model.buffers()], "parameter")
        self.tensors.__enter__()

    def stop_tensors(self) -> None:
        if self.tensors is None:
            return
        self.tensors.__exit__(None, None, None)
        self.report["tensor_peak_mb"] = round(self.tensors.peak_bytes / MIB, 1)
        self.report["largest"] = [group.describe() for group in self.tensors.largest(4)]
        self.tensors = None

    def step_done(self) -> None:
        from sotopia_env.training import rss

        self.report["steps"].append(rss.peak_rss_mb())
        rss.reset_peak_rss()


def hook_trl_trainers(phases: Phases) -> None:
    """Every ``transformers.Trainer`` made from now on reports its phases (a benchmark-only patch)."""
    from transformers import Trainer, TrainerCallback

    class StepMemory(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            phases.mark("before_steps")
            self.model = model

        def on_step_begin(self, args, state, control, **kwargs):
            if not phases.report["steps"] and phases.tensors is None and "tensor_peak_mb" not in phases.report:
                phases.start_tensors(self.model)

        def on_step_end(self, args, state, control, **kwargs):
            phases.stop_tensors()
            phases.step_done()

    original = Trainer.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.add_callback(StepMemory())

    Trainer.__init__ = init


def hook_episode_grpo(phases: Phases) -> None:
    """Episode GRPO's loop reports its steps itself (``peak_rss_mb``); the first update's tensors are read here."""
    from sotopia_env.training import episode_grpo

    original = episode_grpo.update_policy

    def update_policy(model, *args, **kwargs):
        first = "tensor_peak_mb" not in phases.report
        if first:
            phases.start_tensors(model)
        try:
            return original(model, *args, **kwargs)
        finally:
            if first:
                phases.stop_tensors()

    episode_grpo.update_policy = update_policy


class PlayingPeak:
    """What the local backends hold at the RSS peak of a stage that plays episodes (a benchmark-only patch).

    The scheduler runs in worker threads, one per backend, where a dispatch mode (``_tensor_peak.py``) is not
    safe; so a thread samples the RSS every 20 ms and, at each new peak, adds up the backends' tensors: the
    model weights (each storage once: an adapter shares its base's), the slot caches' keys and values and the
    prefix caches. Activations are not counted, so this too is a lower bound of the live tensors."""

    def __init__(self, phases: Phases) -> None:
        import threading

        from sotopia_env.backends.local import LocalBackend

        self.phases, self.backends, self.peak = phases, [], 0
        original = LocalBackend.__init__

        def init(backend, *args, **kwargs):
            original(backend, *args, **kwargs)
            self.backends.append(backend)

        LocalBackend.__init__ = init
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            rss = _current_rss_mb()
            if rss > self.peak:
                self.peak = rss
                self._describe()
            time.sleep(0.02)

    def _describe(self) -> None:
        weights, kv, prefix = {}, 0, 0
        for backend in list(self.backends):
            lm = backend.lm
            if lm is None:  # closed
                continue
            for tensor in (*lm.parameters(), *lm.buffers()):
                weights[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            kv += backend._scheduler.cache.nbytes() if backend._scheduler else 0
            prefix += backend._prefix.nbytes if backend._prefix else 0
        live = {"weights": sum(weights.values()), "slot caches": kv, "prefix caches": prefix}
        self.phases.report["tensor_peak_mb"] = round(sum(live.values()) / MIB, 1)
        models = sum(backend.lm is not None for backend in self.backends)
        self.phases.report["largest"] = [
            f"{nbytes / MIB:,.0f} MiB: {what}" + (f" ({models} models)" if what == "weights" else "")
            for what, nbytes in live.items()
        ]


def _current_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pipeline_config(work: Path):
    from sotopia_env.training.config import load_config

    return dataclasses.replace(load_config(PIPELINE_YAML), output_dir=str(work / "run"))


def run_child(stage: str, work: Path, rl_steps: int) -> dict[str, Any]:
    phases = Phases()
    hook_trl_trainers(phases)
    if stage in ("episodes", "dataset"):
        from sotopia_env.training.bc import expert_episodes
        from sotopia_env.training.context import StageContext
        from sotopia_env.training.dataset import build_dataset

        config = pipeline_config(work)
        ctx = StageContext.open(config, progress=False)
        logs, _, counts = expert_episodes(ctx)
        phases.report["what"] = f"{counts.get('total', len(logs))} episodes"
        if stage == "dataset":
            dataset, stats = build_dataset(logs, *config.bc.filter.build(config.seed), config=config.env)
            phases.report["what"] = f"{len(dataset)} examples from {stats.episodes} episodes"
        ctx.store.close()
    elif stage in PIPELINE_STAGES:
        from sotopia_env.training.pipeline import run_stages

        if stage.startswith("eval-"):
            PlayingPeak(phases)

        state, _ = run_stages(pipeline_config(work), only=[stage], progress=False)
        result = state.stages[stage]
        train = result.get("train") or {}
        phases.report["what"] = f"{train['steps']} steps" if train else f"{result['episodes']['total']} episodes"
    elif stage == "grpo":
        from sotopia_env.training.config import load_rl_config
        from sotopia_env.training.trainers import trainer_of

        config = load_rl_config(TEXT_GRPO_YAML)
        config = dataclasses.replace(config, output_dir=str(work / "grpo"), max_steps=rl_steps, progress=False)
        result = trainer_of(config).train(config)
        phases.report["what"] = f"{result.steps} steps"
    elif stage == "episode-grpo":
        from sotopia_env.training.config import load_rl_config
        from sotopia_env.training.trainers import trainer_of

        hook_episode_grpo(phases)
        config = load_rl_config(EPISODE_GRPO_YAML)
        config = dataclasses.replace(
            config, output_dir=str(work / "episode-grpo"), max_steps=rl_steps, dense_reward=2.0, progress=False
        )
        result = trainer_of(config).train(config)
        phases.report["steps"] = [row["peak_rss_mb"] for row in result.log]
        phases.report["before_steps"] = phases.report["first_reset_mb"]
        trained = sum(row["trained_sequences"] for row in result.log)
        phases.report["what"] = f"{result.steps} steps, {trained} sequences trained"
    else:
        raise SystemExit(f"unknown stage {stage!r}")
    if phases.report["steps"] and stage != "episode-grpo":
        phases.mark("after_steps")
    return phases.finish()


# -- the parent: a process per stage, the table --------------------------------------------------------------


def run_stage(stage: str, work: Path, rl_steps: int) -> dict[str, Any]:
    """Run ``stage`` in a process of its own; its report with the process's peak RSS and wall time."""
    report_file = work / f"{stage}.json"
    report_file.unlink(missing_ok=True)
    if stage == "pipeline":
        config = PIPELINE_YAML.read_text().replace("output_dir: runs/pipeline-cpu", f"output_dir: {work / 'whole'}")
        (work / "pipeline.yaml").write_text(config)
        command = [str(Path(sys.executable).parent / "sotopia-env"), "train", "pipeline", str(work / "pipeline.yaml")]
        command.append("--quiet")
    else:
        command = [sys.executable, __file__, "--child", stage, "--keep", str(work), "--rl-steps", str(rl_steps)]
    started = time.perf_counter()
    log = (work / f"{stage}.log").open("w")
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    log.close()
    report = json.loads(report_file.read_text()) if report_file.is_file() else {}
    if stage == "pipeline":
        report["what"] = "eval-base, bc, eval-bc, sr1, eval-sr1"
    peak = max(usage.ru_maxrss / 1024, report.get("process_peak_mb", 0.0))  # see Phases on resets
    report.update(peak_mb=round(peak, 1), seconds=round(time.perf_counter() - started, 1))
    if proc.returncode != 0:
        report["what"] = f"FAILED (exit {proc.returncode}; see {work / stage}.log)"
    return report


def table_row(stage: str, r: dict[str, Any]) -> list[Any]:
    steps = r.get("steps") or []
    nan = float("nan")
    return [
        stage,
        r.get("what", ""),
        r["peak_mb"],
        r.get("before_steps", nan),
        steps[0] if steps else nan,
        max(steps[1:]) if len(steps) > 1 else nan,
        r.get("after_steps", nan),
        r.get("tensor_peak_mb", nan),
        "; ".join(r.get("largest", [])) or "-",
        r["seconds"],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, in order: {','.join(STAGES)}")
    parser.add_argument("--rl-steps", type=int, default=2, help="steps of each GRPO trainer")
    parser.add_argument("--keep", default=None, help="the work directory (default: a temporary one)")
    parser.add_argument("--quick", action="store_true", help="the model-free stages only (a smoke run)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="sotopia-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.child:
        report = run_child(args.child, work, args.rl_steps)
        (work / f"{args.child}.json").write_text(json.dumps(report))
        return
    stages = QUICK_STAGES if args.quick else [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise SystemExit(f"unknown stage {unknown[0]!r} (stages: {', '.join(STAGES)})")
    print(machine_line())
    rows = []
    for stage in stages:
        report = run_stage(stage, work, args.rl_steps)
        rows.append(table_row(stage, report))
        print(f"{stage}: peak RSS {report['peak_mb']:,.0f} MiB in {report['seconds']:.0f} s", file=sys.stderr)
    print_table(
        "peak memory per stage, MiB",
        [
            "stage",
            "ran",
            "peak RSS (process)",
            "before the steps",
            "step 1",
            "later steps",
            "after the steps",
            "live tensors, step 1",
            "largest tensors at that peak",
            "wall s",
        ],
        rows,
        note=f"{machine_line()}; work directory {work}\n",
    )


if __name__ == "__main__":
    main()
