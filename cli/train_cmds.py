"""``sotopia-env train pipeline|bc|sr|rl|run|grpo|eval|status|dataset``: the SOTOPIA-pi loop, RL, from YAML configs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import typer

from sotopia_env.cli.common import check_output_file, console, needs_extra, user_errors
from sotopia_env.cli.options import RayAddress, Store

train_app = typer.Typer(
    help="Train agents: behaviour cloning (BC), self-reinforcement (SR), RL on social rewards (GRPO), evaluation.",
    no_args_is_help=True,
)

ConfigArg = typer.Argument(..., help="The pipeline's YAML config (see examples/pipeline-cpu.yaml).")
Force = typer.Option(False, "--force", help="Rerun the stage(s) even if state.json marks them finished.")
Quiet = typer.Option(False, "--quiet", help="No progress bars.")


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """A user's error as one line; a missing 'train' extra (TRL, PEFT) as the line that installs it."""
    with needs_extra("train", "trl", "peft"), _user_errors():
        yield


def _user_errors():
    from sotopia_env.episodes.ray_batch import RayError
    from sotopia_env.episodes.store import StoreError
    from sotopia_env.errors import UserError
    from sotopia_env.training.config import ConfigError
    from sotopia_env.training.dataset import ReplayError, TestSplitError
    from sotopia_env.training.pipeline import StageOrderError
    from sotopia_env.training.policy_server import PolicyServerError
    from sotopia_env.training.rl.tasks import TaskError

    return user_errors(
        ConfigError, StageOrderError, TestSplitError, ReplayError, StoreError, TaskError, PolicyServerError,
        RayError, UserError, ValueError, OSError,
    )  # fmt: skip


def _run(config_path: Path, only: list[str] | None, force: bool, quiet: bool, ray: str | None = None) -> None:
    from sotopia_env.episodes.report import print_report
    from sotopia_env.training.config import load_config
    from sotopia_env.training.distributed import is_main_process
    from sotopia_env.training.pipeline import run_stages

    with _errors():
        config = load_config(config_path)
        if ray is not None:  # --ray ADDRESS over the config's ray: section
            import dataclasses

            from sotopia_env.episodes.ray_batch import RayConfig

            config.ray = dataclasses.replace(config.ray or RayConfig(), address=ray)
        state, report = run_stages(config, only=only, force=force, progress=not quiet)
    if not is_main_process():  # under accelerate launch, one summary (the main process's)
        return
    for name, stage in state.stages.items():
        if only is None or name in only:
            line = f"[bold]{name}[/]: {stage['model']}"
            if stage.get("dataset"):
                line += f"\n  data: {stage['dataset']}"
            if stage.get("train"):
                line += _train_line(stage["train"])
            if stage.get("note"):
                line += f"\n  note: {stage['note']}"
            console.print(line, highlight=False)
    if report.rows:
        print_report(report, console, title=f"{config.output_dir}: every stage vs {config.eval.partner}")
    console.print(f"outputs in {config.output_dir} (state.json, report.json)")


def _train_line(train: dict) -> str:
    """Loss (SFT stages) or mean reward (GRPO) from the first to the last logged step."""
    key, values = ("loss", train.get("losses")) if "losses" in train else ("reward", train.get("rewards"))
    values = [v for v in values or [] if v is not None]
    if not values:
        return ""
    steps = f" over {train['steps']} steps" if "steps" in train else ""
    return f"\n  {key}: {values[0]:.3f} -> {values[-1]:.3f}{steps}"


@train_app.command("pipeline")
def pipeline(config: Path = ConfigArg, force: bool = Force, quiet: bool = Quiet, ray: str = RayAddress) -> None:
    """Run every stage (eval-base, bc, eval-bc, sr1, eval-sr1, ...), resuming at the first unfinished one."""
    _run(config, None, force, quiet, ray)


@train_app.command("bc")
def bc(config: Path = ConfigArg, force: bool = Force, quiet: bool = Quiet, ray: str = RayAddress) -> None:
    """Behaviour cloning only: expert episodes on the train scenarios, rated, filtered, trained on."""
    _run(config, ["bc"], force, quiet, ray)


@train_app.command("sr")
def sr(
    config: Path = ConfigArg,
    round_: int = typer.Option(None, "--round", min=1, help="Only this round (default: every round)."),
    force: bool = Force,
    quiet: bool = Quiet,
    ray: str = RayAddress,
) -> None:
    """Self-reinforcement rounds only: the policy plays itself, is rated, filtered and trained further."""
    from sotopia_env.training.config import load_config

    with _errors():
        rounds = load_config(config).sr.rounds
    wanted = [f"sr{round_}"] if round_ else [f"sr{k}" for k in range(1, rounds + 1)]
    _run(config, wanted, force, quiet, ray)


@train_app.command("rl")
def rl(config: Path = ConfigArg, force: bool = Force, quiet: bool = Quiet) -> None:
    """The pipeline's RL stage only (its rl: section, whose task chooses the trainer), from the last SR policy."""
    _run(config, ["rl"], force, quiet)


TrainerConfigArg = typer.Argument(
    ..., help="A trainer's YAML config; its task chooses the trainer (see examples/grpo-socialiqa-cpu.yaml)."
)


@train_app.command("run")
def run_trainer(config: Path = TrainerConfigArg, quiet: bool = Quiet) -> None:
    """One trainer alone, on its own config: the config's task chooses it. GRPO with a LoRA on a task's prompts
    (socialiqa, social_r1, item_selection, social_turns) or on whole episodes (task: episodes; see
    examples/grpo-episodes-cpu.yaml), or any trainer registered in sotopia_env.training.trainers.

    Resumes from the last checkpoint in OUTPUT_DIR/checkpoints; OUTPUT_DIR becomes a model spec."""
    import dataclasses

    from sotopia_env.training.config import load_rl_config
    from sotopia_env.training.trainers import trainer_of

    with _errors():
        cfg = load_rl_config(config)
        if quiet:
            cfg = dataclasses.replace(cfg, progress=False)
        trainer = trainer_of(cfg)
        result = trainer.train(cfg)
    line = f"[bold]{trainer.name}[/] ({result.dataset()}): {result.model_dir}"
    line += _train_line(dataclasses.asdict(result))
    line += f"\n  {result.note()}" if result.note() else ""
    console.print(line, highlight=False)
    console.print(f"model spec in {result.model_dir} (play it: sotopia-env run --agent1 {result.model_dir})")


@train_app.command("grpo")
def grpo(config: Path = TrainerConfigArg, quiet: bool = Quiet) -> None:
    """The same as train run: GRPO on a task's prompts or on whole episodes (task: episodes)."""
    run_trainer(config, quiet)


@train_app.command("eval")
def evaluate(
    config: Path = ConfigArg,
    stage: list[str] = typer.Option(None, "--stage", help="Stage(s) to evaluate: base, bc, sr1, ... (default: all)."),
    force: bool = Force,
    quiet: bool = Quiet,
    ray: str = RayAddress,
) -> None:
    """Evaluate finished stages against the fixed partner on held-out scenarios; print every stage in one table."""
    from sotopia_env.training.config import load_config
    from sotopia_env.training.stages import trained_stages

    with _errors():
        stages = stage or trained_stages(load_config(config))
    _run(config, [f"eval-{s}" for s in stages], force, quiet, ray)


@train_app.command("status")
def status(config: Path = ConfigArg) -> None:
    """Show which stages of a config have finished."""
    from rich.table import Table

    from sotopia_env.training.config import load_config
    from sotopia_env.training.pipeline import PipelineState, plan

    with _errors():
        cfg = load_config(config)
        state = PipelineState.load(cfg.out)
    table = Table("stage", "finished", "model", "note")
    for name in plan(cfg):
        done = state.stages.get(name)
        table.add_row(
            name, done["finished_at"] if done else "-", done["model"] if done else "", (done or {}).get("note", "")
        )
    console.print(table)


@train_app.command("dataset")
def dataset(
    tag: str = typer.Option(..., "--tag", help="The episodes' tag."),
    out: Path = typer.Option(..., "--out", help="Where to write the examples (JSONL)."),
    store: str = Store,
    model: str = typer.Option(None, "--model", help="Only the seats this model spec played."),
    top1: bool = typer.Option(True, "--top1/--all", help="Keep only the best episode per scenario and seat."),
    min_goal: float = typer.Option(None, "--min-goal", help="Keep agent-episodes with at least this goal score."),
    keep_none: bool = typer.Option(False, "--keep-none", help="Keep turns where the agent did nothing."),
    balance: bool = typer.Option(False, "--balance", help="Downsample to equal example counts per seat."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Build a training dataset (prompt/completion JSONL) from stored episodes, as the stages do."""
    from sotopia_env.cli.episodes_cmds import open_store_or_fail
    from sotopia_env.training.dataset import FilterConfig, build_dataset, played_by

    check_output_file(out, "--out")
    st = open_store_or_fail(store)
    sample_filters, example_filters = FilterConfig(top1, min_goal, not keep_none, balance).build(seed)
    if model:
        sample_filters.insert(0, played_by(model))
    with _errors():
        data, stats = build_dataset(st.iter(tag), sample_filters, example_filters)
        data.to_json(str(out))
    console.print(stats.summary(), highlight=False)
    console.print(f"{len(data)} examples written to {out}")
