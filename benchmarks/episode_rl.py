"""Episode RL under a protocol a reviewer can check: does GRPO on whole episodes make SmolLM2-135M better at the
verifiable scenarios than its BC (and SR) start, beyond what a control that carries no signal does?

    python benchmarks/episode_rl.py --keep RUN --split dev --seeds 0,1,2 --rows bc,bc@0.3,grpo,grpo-shuffled
    python benchmarks/episode_rl.py --keep RUN --split test --final --seeds 0,1,2 --rows ...   # once, at the end

**The protocol.** Every choice (steps, learning rate, beta, the best BC temperature) is made on ``--split dev``
(``verifiable:dev``, 12 instances); ``--split test`` (``verifiable:test``, 36 instances) is run once, with
``--final``, for the rows chosen, and the run folder records what it ran under before it plays (settings, training
seeds, the row set and the code commit, from a clean checkout): a test run with other settings, seeds or rows is
refused, one at another commit may only reprint, and the test table is printed only once every seed is in. Every
trained row is trained once per seed in ``--seeds`` (the BC of seed S starts every row of seed S); the evaluation's
own seeds (``--eval-seed``) are the same for every row, so rows are paired by training seed, instance and evaluation
seed. Each difference has two 95% intervals over the per-(seed, instance) mean differences: a nested bootstrap
(training seeds resampled, then instances within each seed; 4,000 resamples) and a t-interval over the seeds' mean
differences (n - 1 degrees of freedom). With 3 seeds the bootstrap has 10 distinct seed draws and understates the
seed-to-seed spread; the t-interval does not, and a claim needs both above 0.

Rows (trained into ``RUN/train/<row>/seed<S>``, evaluated into ``RUN/evals/<split>/<row>/seed<S>.json``; a rerun
reuses what is there, episode by episode):

- ``base``: the embedded SmolLM2-135M-Instruct (untrained: one evaluation, no seed).
- ``bc``: ``VerifiableExpert`` plays every ``verifiable:train`` instance against ``rule-partner``; its turns in the
  episodes it won become SFT examples (the prompts ``LLMAgent`` sends); a LoRA is trained on them (seed S;
  micro-batches of 2, 4 accumulated: the effective batch of 8 at a quarter of the memory).
- ``sr``: BC + one SR round (SOTOPIA-pi): the BC policy plays every train instance ``--sr-samples`` times, the
  episodes are filtered as the SR stage filters them (best per scenario and seat, goal >= 1) and trained on.
- ``grpo``: episode GRPO (``training.episode_grpo``) for ``--steps`` steps from the BC adapter.
- ``grpo-shuffled``: the same, with each group's rewards permuted among its episodes (``shuffle_rewards``): the
  same compute and no signal, so its interval against BC must cover 0. This is the control that can fail.
- ``grpo-dense``: ``grpo`` with ``dense_reward: 2`` (partial credit, success dominating).
- ``sr-grpo``: ``grpo`` from the SR adapter (the SOTOPIA-RL question: RL on top of the SOTOPIA-pi recipe), and
  ``sr-grpo-shuffled``, its shuffled-reward control.
- ``random``, ``heuristic``, ``oracle``: the kinds' baselines (``agents.baselines``; the heuristic is the BC
  expert), played on the same instances, seeds and turn limit as every row: the floor, the script BC imitates, and
  the ceiling.
- ``grpo-lr0``: learning rate 0, a reproducibility check only (bit-identical to BC by construction).

A row may carry GRPO overrides and an evaluation temperature: ``grpo[learning_rate=1e-4,beta=0.2]`` trains its
own stage with those settings; ``bc@0.3`` evaluates the bc stages sampled at T 0.3 (and no greedy pass). A plain
row is evaluated greedily (one episode per instance) and ``--k`` times sampled at the training temperature.

The table: per row and split, mean goal greedy and sampled (pooled over seeds), the sampled mean of each seed,
goal / success per kind, and the paired difference from its reference (BC for the rows trained from BC, SR for
``sr-grpo``, base for BC) with its 95% interval; ``vs best BC`` compares against the BC condition (greedy or a
temperature) that was best on dev (kept in ``RUN/choices.json``). Not a test: run it by hand.

A stopped run resumes: finished stages are in ``RUN/stages.json`` and evaluations in their files; a BC or SR stage
cut short restarts from its last checkpoint (one every 4 optimiser steps), an episode-GRPO stage from its last step.
The protocol's run is committed without its adapters (``benchmarks/runs/episode_rl``: stages, evaluations, choices,
the test guard), so any checkout reprints its tables in seconds; a row with episodes still to play trains its stage
again, and ``stages.json`` records whether the weights came out the same (``adapter_sha256``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from _stages import INTERVALS, both_intervals, fmt_diff, guard_test_once, run_stage, seeds_missing, stage_kept

EXPERT = "sotopia_env.training.experts:VerifiableExpert"
BASELINES = ("random", "heuristic", "oracle")  # agents.baselines: untrained rows, beside every learned one
TRAINED = ("bc", "sr", "grpo", "grpo-shuffled", "grpo-dense", "sr-grpo", "sr-grpo-shuffled", "grpo-lr0")
GRPO_ROWS = {  # row -> (the stage it starts from, the overrides it always has)
    "grpo": ("bc", {}),
    "grpo-shuffled": ("bc", {"shuffle_rewards": True}),
    "grpo-dense": ("bc", {"dense_reward": 2.0}),
    "grpo-lr0": ("bc", {"learning_rate": 0.0}),
    "sr-grpo": ("sr", {}),
    "sr-grpo-shuffled": ("sr", {"shuffle_rewards": True}),
}
SPLITS = {"dev": "verifiable:dev", "test": "verifiable:test"}
GROUP_FLAGS = {"group_size": "group_size", "groups_per_step": "groups_per_step", "resample": "max_resample_groups"}


def group_defaults() -> dict[str, int]:
    """The GRPO group sizes' flags (``GROUP_FLAGS``: flag -> ``EpisodeGRPOConfig`` field) at the config's defaults."""
    from dataclasses import fields

    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig

    default = {f.name: f.default for f in fields(EpisodeGRPOConfig)}
    return {flag: default[name] for flag, name in GROUP_FLAGS.items()}


# what the table compares each trained row with (the stage it was trained from)
REFERENCE = {"bc": "base", "sr": "bc", **{row: start for row, (start, _) in GRPO_ROWS.items()}}
# rows the table also compares directly: the true reward against its control of the same compute and no signal
CONTRASTS = (
    ("grpo", "grpo-shuffled"),
    ("sr-grpo", "sr-grpo-shuffled"),
    ("grpo", "heuristic"),  # issue #57's target: GRPO from BC beats its own BC expert
    ("sr-grpo", "heuristic"),
)


@dataclass(frozen=True)
class Row:
    """``NAME[key=value,...]@T``: a stage (NAME with GRPO overrides) and how it is evaluated (``@T``: sampled at T
    only; none: greedy plus sampled at the training temperature)."""

    name: str
    overrides: tuple[tuple[str, object], ...] = ()
    temperature: float | None = None
    text: str = field(default="", compare=False)

    @classmethod
    def parse(cls, text: str) -> Row:
        match = re.fullmatch(r"([a-z0-9-]+)(?:\[([^\]]*)\])?(?:@([0-9.]+))?", text.strip())
        if not match or match.group(1) not in ("base", *BASELINES, *TRAINED):
            raise SystemExit(
                f"--rows: {text!r} is not NAME[key=value,...][@T] with NAME one of base, {BASELINES}, {TRAINED}"
            )
        overrides = []
        for item in filter(None, (match.group(2) or "").split(",")):
            key, _, value = item.partition("=")
            overrides.append(
                (key.strip(), json.loads(value) if value.strip() not in ("true", "false") else value == "true")
            )
        if overrides and match.group(1) not in GRPO_ROWS:
            raise SystemExit(f"--rows: {text!r}: overrides are for the GRPO rows ({', '.join(GRPO_ROWS)})")
        temperature = float(match.group(3)) if match.group(3) else None
        return cls(match.group(1), tuple(overrides), temperature, text.strip())

    @property
    def stage(self) -> str:
        """The trained stage's name: the row without its temperature."""
        return self.text.split("@")[0]

    @property
    def start(self) -> str | None:
        """The stage this row's stage is trained from (None for base and bc)."""
        return {"sr": "bc", **{r: s for r, (s, _) in GRPO_ROWS.items()}}.get(self.name)


# -- playing ---------------------------------------------------------------------------------------------------------


def rollout_config(args: argparse.Namespace, scenarios: str, **kw):
    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig

    settings = {"seed": args.eval_seed, **kw}
    return EpisodeGRPOConfig(
        scenarios=scenarios, max_turns=args.max_turns, max_completion_length=args.max_new_tokens,
        temperature=args.temperature, **settings,
    )  # fmt: skip


def play(spec: str, args: argparse.Namespace, scenarios: str, seeds: list[int], temperature: float, **kw) -> list:
    """Every instance of ``scenarios`` once per seed, the policy ``spec`` against the rule partner (``kw``: other
    rollout settings, such as ``role`` and ``partner``): a list of ((instance id, seed), episode)."""
    from dataclasses import replace

    from sotopia_env.backends.local import LocalBackend
    from sotopia_env.training.episode_grpo import make_rollout
    from sotopia_env.training.episode_rollouts import play_many

    rollout = make_rollout(rollout_config(args, scenarios, **kw), spec)
    rollout.settings = replace(rollout.settings, temperature=temperature)
    starts = [(s, seed) for s in rollout.setups for seed in seeds]
    if spec.startswith("baseline-"):  # a baseline row: the same starts and env, the baseline in the learner's seat
        return [((setup.scenario.id, seed), play_baseline(spec, rollout, setup, seed)) for setup, seed in starts]
    backend = LocalBackend.from_spec(spec, max_batch_size=args.batch)
    try:
        episodes = asyncio.run(play_many(rollout, backend, starts))
    finally:
        backend.close()
    return [((setup.scenario.id, seed), e) for (setup, seed), e in zip(starts, episodes, strict=True)]


def play_baseline(spec: str, rollout, setup, seed: int):
    """One episode of a baseline (``agents.baselines``) in seat 1 of ``setup``, judged as the rows' are."""
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.episodes.runner import play as play_episode
    from sotopia_env.rewards import episode_reward
    from sotopia_env.training.episode_rollouts import Episode

    seats = [load_agent(spec), rollout.partner_agent()]
    log = asyncio.run(play_episode(setup, seats, rollout.evaluator, rollout.env, [spec, rollout.partner], seed=seed))
    reward = episode_reward(log, 0, rollout.env.reward_dimension, rollout.turn_reward, rollout.dense_reward)
    return Episode(log, reward, [], 0)


def eval_scenarios(split: str, args: argparse.Namespace) -> str:
    """The held-out instances: the split's, of ``--kinds`` alone when given."""
    kinds = [k for k in getattr(args, "kinds", "").split(",") if k]
    return ",".join(f"verifiable:{k}:{split}" for k in kinds) if kinds else SPLITS[split]


def conditions(row: Row, args: argparse.Namespace) -> list[tuple[float, list[int]]]:
    """(temperature, evaluation seeds) pairs the row is evaluated under; temperature 0 is greedy."""
    sampled = [args.eval_seed + 1 + i for i in range(args.k)]
    if row.temperature is not None:
        return [(row.temperature, sampled)]
    return [(0.0, [args.eval_seed]), *([(args.temperature, sampled)] if args.k else [])]


def evaluate(model: Callable[[], str], row: Row, split: str, args: argparse.Namespace, done: list[dict]) -> list[dict]:
    """The held-out episodes, one record each: instance, seed, temperature, kind, goal, success, turns, invalid.
    Those in ``done`` are kept, not played again; ``model()`` (which may train the stage) is called only when an
    episode is to be played."""
    records = list(done)
    for temperature, wanted in conditions(row, args):
        seeds = [s for s in wanted if not any(r["temperature"] == temperature and r["seed"] == s for r in done)]
        if not seeds:
            continue
        for (instance, seed), e in play(model(), args, eval_scenarios(split, args), seeds, temperature):
            record = {"instance": instance, "seed": seed, "temperature": temperature}
            if e.log is None or e.reward.value is None:
                records.append({**record, "unrated": True})
                continue
            learner = e.log.setup.agent_names[0]
            mine = [t for t in e.log.turns if t.agent == learner]
            records.append(
                {
                    **record,
                    "kind": e.log.setup.scenario.verifiable.kind,
                    "goal": e.reward.value,
                    "success": float(bool(e.reward.success)),
                    "turns": len(e.log.turns),
                    "invalid": sum(t.action.error is not None for t in mine) / max(1, len(mine)),
                }
            )
    return records


# -- the stages -----------------------------------------------------------------------------------------------------


def train_bc(
    out: Path,
    args: argparse.Namespace,
    seed: int,
    scenarios: str = "verifiable:train",
    scenarios_dir: Sequence[str] = (),
    example_filters: Sequence = (),
) -> dict:
    """Expert demonstrations on the ``scenarios`` (from ``scenarios_dir`` too; ``--bc-demos`` episodes per
    instance, each meeting its own drawn hidden type; deterministic: the same for every training seed), then a
    LoRA SFT on the won ones (``example_filters`` drop turns) with training seed ``seed``."""
    from sotopia_env.agents.rule_partners import RulePartner
    from sotopia_env.episodes.runner import play as play_episode
    from sotopia_env.evaluators import VerifiableJudge
    from sotopia_env.training.dataset import build_dataset, min_goal, played_by
    from sotopia_env.training.episode_grpo import make_rollout
    from sotopia_env.training.experts import VerifiableExpert

    rollout = make_rollout(rollout_config(args, scenarios, scenarios_dir=list(scenarios_dir)), EXPERT)

    async def demonstrations():
        return await asyncio.gather(
            *(
                play_episode(
                    s,
                    [VerifiableExpert(), RulePartner()],
                    VerifiableJudge(),
                    rollout.env,
                    [EXPERT, "rule-partner"],
                    seed=args.eval_seed + k,
                )  # fmt: skip
                for s in rollout.setups
                for k in range(getattr(args, "bc_demos", 1))
            )
        )

    logs = asyncio.run(demonstrations())
    dataset, _ = build_dataset(logs, [played_by(EXPERT), min_goal(1)], example_filters)
    result = sft(out, dataset, args, seed)
    won = sum(1 for log in logs if log.rating and log.rating.ratings[log.setup.agent_names[0]].success)
    return {"note": f"{result.examples} turns of {won} won expert episodes (of {len(logs)}), {result.steps} steps"}


def sft(
    out: Path,
    dataset,
    args: argparse.Namespace,
    seed: int,
    start: Path | None = None,
    lr: float | None = None,
    epochs: float | None = None,
    max_length: int = 1024,
):
    """The benchmarks' LoRA SFT of ``dataset`` (TRL's result): a new LoRA (r 8) on the embedded model at
    ``--bc-lr`` for ``--bc-epochs``, or the adapter of ``start`` continued (at ``lr`` for ``epochs``)."""
    from sotopia_env.model_ref import read_model_ref
    from sotopia_env.training.sft import SFTTrainConfig, train_sft

    base, adapter = read_model_ref(str(start)) if start is not None else ("smollm2-135m", None)
    config = SFTTrainConfig(
        base_model=base, init_adapter=adapter, output_dir=str(out), lora_r=8, lora_alpha=32,
        learning_rate=args.bc_lr if lr is None else lr, num_epochs=args.bc_epochs if epochs is None else epochs,
        batch_size=2, grad_accum=4, max_length=max_length, save_steps=4, seed=seed, progress=False,
        gradient_checkpointing=args.checkpointing,
    )  # fmt: skip
    return train_sft(dataset, config)


def train_sr(out: Path, bc: Path, args: argparse.Namespace, seed: int) -> dict:
    """One SR round from the BC policy: its own sampled episodes on the train instances, filtered as the SR
    stage filters (best per scenario and seat, goal at least 1), trained on from the BC adapter."""
    from sotopia_env.training.dataset import build_dataset, min_goal, top1_per_scenario_role

    seeds = [1000 * seed + 100 + i for i in range(args.sr_samples)]
    episodes = play(str(bc), args, "verifiable:train", seeds, args.temperature)
    logs = [e.log for _, e in episodes if e.log is not None]
    learner_seat = lambda samples: [s for s in samples if s.seat == 0]  # noqa: E731  (not the rule partner's)
    dataset, _ = build_dataset(logs, [learner_seat, top1_per_scenario_role, min_goal(1)])
    if len(dataset) == 0:
        raise SystemExit(f"sr seed {seed}: no self-play episode passed the filters")
    result = sft(out, dataset, args, seed, start=bc, lr=args.bc_lr / 2, epochs=2)
    return {"note": f"{result.examples} turns of {len(logs)} self-play episodes, {result.steps} steps"}


def train_grpo(out: Path, start: Path, args: argparse.Namespace, seed: int, overrides: dict) -> dict:
    from sotopia_env.training.episode_grpo import train_episode_grpo

    settings = {
        "max_steps": args.steps, "learning_rate": args.lr, "num_iterations": args.iterations, "beta": args.beta,
        "save_steps": 1, "progress": False, "seed": seed, "gradient_checkpointing": args.checkpointing,
        "group_size": args.group_size, "groups_per_step": args.groups_per_step, "max_resample_groups": args.resample,
        "scale_rewards": "batch",  # the protocol's (episode GRPO's default was batch when it was fixed)
        **overrides,
    }  # fmt: skip
    config = rollout_config(args, args.train_scenarios, output_dir=str(out), **settings).starting_from(str(start))
    result = train_episode_grpo(config)
    log = result.log
    return {
        "note": f"{result.steps} steps, train rewards {[None if r is None else round(r, 2) for r in result.rewards]}",
        "zero_std_share": result.zero_std_share,
        "approx_kl": statistics.fmean(row["approx_kl"] for row in log) if log else None,
        "clipped": statistics.fmean(row["clipped"] for row in log) if log else None,
        "log": log,
    }


class Run:
    """The run folder: trained stages (``stages.json``), evaluations, the dev choices and the test guard."""

    def __init__(self, folder: Path, args: argparse.Namespace) -> None:
        self.folder, self.args = folder, args
        self.stages_file = folder / "stages.json"
        self.stages: dict[str, dict] = json.loads(self.stages_file.read_text()) if self.stages_file.is_file() else {}
        self.frozen: str | None = None  # why no test episode may be played here (the guard's answer)

    def stage_dir(self, stage: str, seed: int) -> Path:
        return self.folder / "train" / re.sub(r"[^A-Za-z0-9_.=,-]", "_", stage) / f"seed{seed}"

    def spec(self, row: Row, seed: int | None) -> str:
        if row.name == "base":
            return "smollm2-135m"
        if row.name in BASELINES:
            return f"baseline-{row.name}"
        self.ensure(row, seed)
        return str(self.stage_dir(row.stage, seed))

    def ensure(self, row: Row, seed: int) -> None:
        """Train the row's stage for ``seed`` (and the stages it starts from) unless it is kept (``stage_kept``: a
        committed record has no adapters, so its stages train again and say whether the weights came out the
        same)."""
        key, args, out = f"{row.stage}/seed{seed}", self.args, self.stage_dir(row.stage, seed)
        if stage_kept(self.stages, key, out):
            return
        if row.name == "bc":
            trainer = lambda: train_bc(out, args, seed, args.train_scenarios)  # noqa: E731
        elif row.name == "sr":
            self.ensure(Row.parse("bc"), seed)
            trainer = lambda: train_sr(out, self.stage_dir("bc", seed), args, seed)  # noqa: E731
        else:
            start, fixed = GRPO_ROWS[row.name]
            self.ensure(Row.parse(start), seed)
            overrides = {**fixed, **dict(row.overrides)}
            trainer = lambda: train_grpo(out, self.stage_dir(start, seed), args, seed, overrides)  # noqa: E731
        run_stage(
            self.stages, self.stages_file, key, out, trainer, settings=settings_of(args, row), threads=args.threads
        )

    def evaluations(self, row: Row, split: str, seeds: list[int]) -> dict[int | None, list[dict]]:
        """The row's evaluation records per training seed (``None`` for base), played where missing."""
        out: dict[int | None, list[dict]] = {}
        for seed in [None] if row.name in ("base", *BASELINES) else seeds:
            cached = self.folder / "evals" / split / row.text / f"seed{'-' if seed is None else seed}.json"
            done = json.loads(cached.read_text()) if cached.is_file() else []
            t0 = time.perf_counter()
            records = evaluate(lambda seed=seed: self.model(row, seed, split), row, split, self.args, done)
            if len(records) > len(done):
                cached.parent.mkdir(parents=True, exist_ok=True)
                cached.write_text(json.dumps(records, indent=1))
                print(
                    f"{row.text} seed {seed} on {split}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True
                )
            out[seed] = records
        return out

    def model(self, row: Row, seed: int | None, split: str) -> str:
        """The policy to play an episode with (training its stage if needed); refused on a frozen test record."""
        if split == "test" and self.frozen:
            raise SystemExit(f"{row.text} seed {seed} has test episodes still to play, and {self.frozen}")
        return self.spec(row, seed)

    def guard_test(self, rows: list[Row]) -> None:
        """``--split test`` runs once, fully specified: settings, training seeds, the row set and the commit are
        kept before it plays, and anything else is refused (``_stages.guard_test_once``). A legacy record (its
        guard kept neither seeds nor commit) reprints with the seeds its evaluations hold, and nothing else."""
        texts = [r.text for r in rows]
        self.frozen = guard_test_once(self.folder, settings_of(self.args), texts, self.args.final, self.args.seeds)
        kept = json.loads((self.folder / "test_settings.json").read_text())
        if "seeds" not in kept:
            held = [
                {int(f.stem[4:]) for f in (self.folder / "evals" / "test" / r.text).glob("seed[0-9]*.json")}
                for r in rows
                if r.name != "base"
            ]
            seeds = sorted(set.intersection(*held)) if held else []
            if sorted(self.args.seeds) != seeds:
                raise SystemExit(
                    f"--seeds {self.args.seeds}: the legacy test record holds training seeds {seeds} for every "
                    "row; it reprints with exactly those"
                )


def settings_of(args: argparse.Namespace, row: Row | None = None) -> dict:
    """What a stage's training depends on (and, for the test guard, the evaluation's settings)."""
    keys = ("steps", "lr", "iterations", "beta", "bc_epochs", "bc_lr", "sr_samples", "max_turns", "max_new_tokens",
            "temperature", "train_scenarios", "k", "eval_seed")  # fmt: skip
    settings = {k: getattr(args, k) for k in keys}
    for key, default in (("kinds", ""), ("bc_demos", 1), *group_defaults().items()):  # kept only when set: older
        # records keep their digest
        if getattr(args, key, default) != default:
            settings[key] = getattr(args, key)
    if row is not None:
        settings["overrides"] = dict(row.overrides)
    return settings


# -- the statistics ---------------------------------------------------------------------------------------------------


def cells(records_by_seed: dict[int | None, list[dict]], temperature: float) -> dict[int | None, dict[str, float]]:
    """Mean goal per training seed and instance, over the evaluation seeds at ``temperature``."""
    out: dict[int | None, dict[str, float]] = {}
    for seed, records in records_by_seed.items():
        goals: dict[str, list[float]] = {}
        for r in records:
            if "goal" in r and r["temperature"] == temperature:
                goals.setdefault(r["instance"], []).append(r["goal"])
        out[seed] = {instance: statistics.fmean(g) for instance, g in goals.items()}
    return out


def pooled_mean(records_by_seed: dict[int | None, list[dict]], temperature: float) -> float:
    goals = [
        r["goal"] for rs in records_by_seed.values() for r in rs if "goal" in r and r["temperature"] == temperature
    ]
    return statistics.fmean(goals) if goals else float("nan")


def kind_cells(records_by_seed: dict[int | None, list[dict]], temperature: float) -> str:
    by_kind: dict[str, list[dict]] = {}
    for rs in records_by_seed.values():
        for r in rs:
            if "goal" in r and r["temperature"] == temperature:
                by_kind.setdefault(r["kind"], []).append(r)
    return "; ".join(
        f"{kind[:5]}. {statistics.fmean(r['goal'] for r in rs):.2f} / {statistics.fmean(r['success'] for r in rs):.2f}"
        for kind, rs in sorted(by_kind.items())
    )


def main_temperature(row: Row, args: argparse.Namespace, chosen: dict[str, float] | None = None) -> float:
    """The condition a row is compared under: the one dev chose for it (``chosen``: row -> temperature, from
    ``choices.json``), else its own temperature, else the training temperature (sampled)."""
    if chosen and row.text in chosen:
        return chosen[row.text]
    return row.temperature if row.temperature is not None else (args.temperature if args.k else 0.0)


def choose_temperatures(evals: dict[str, dict], args: argparse.Namespace) -> dict[str, float]:
    """Per row evaluated under more than one condition (greedy and sampled): the temperature whose pooled mean
    goal is highest here (on dev); test then compares every row at the temperature dev chose for it."""
    chosen = {}
    for text, by_seed in evals.items():
        options = conditions(Row.parse(text), args)
        if len(options) > 1:
            temperatures = [t for t, _ in options]
            chosen[text] = max(temperatures, key=lambda t: (pooled_mean(by_seed, t), -t))  # a tie: the cooler
    return chosen


def best_bc(evals: dict[str, dict], args: argparse.Namespace) -> tuple[str, float] | None:
    """The BC condition (row text, temperature) with the highest pooled mean among those evaluated here."""
    candidates = []
    for text, by_seed in evals.items():
        row = Row.parse(text)
        if row.name == "bc" and not row.overrides:
            for temperature, _ in conditions(row, args):
                candidates.append((pooled_mean(by_seed, temperature), text, temperature))
    if not candidates:
        return None
    _, text, temperature = max(candidates)
    return text, temperature


def print_table(split: str, evals: dict[str, dict], run: Run, args: argparse.Namespace) -> None:
    from _common import machine_line

    choices_file = run.folder / "choices.json"
    choices = json.loads(choices_file.read_text()) if choices_file.is_file() else {}
    if split == "dev":
        if best := best_bc(evals, args):
            choices["best_bc"] = list(best)
        choices["temperatures"] = {**choices.get("temperatures", {}), **choose_temperatures(evals, args)}
        choices_file.write_text(json.dumps(choices, indent=2))
    best, chosen = choices.get("best_bc"), choices.get("temperatures", {})
    where = eval_scenarios(split, args)
    print(f"## Episode RL on verifiable:{split} ({where}): seeds {args.seeds}, 1 greedy + {args.k} sampled\n")
    print(
        f"Best BC condition on dev: {best[0] + (' greedy' if best[1] == 0 else f' at T {best[1]}') if best else '-'}\n"
    )
    print(
        "| row | split | goal, greedy | goal, sampled | T dev chose | at that T, per seed | goal / success per kind | "
        f"vs its start [{INTERVALS}] | vs best BC [{INTERVALS}] | zero-var groups | approx_kl | stage time | peak RSS |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for text, by_seed in evals.items():
        row = Row.parse(text)
        t = main_temperature(row, args, chosen)
        greedy = pooled_mean(by_seed, 0.0) if row.temperature is None else float("nan")
        hot = row.temperature if row.temperature is not None else args.temperature
        sampled = pooled_mean(by_seed, hot) if args.k or row.temperature is not None else float("nan")
        per_seed = ", ".join(f"{pooled_mean({s: rs}, t):.2f}" for s, rs in by_seed.items() if s is not None) or "-"
        start = REFERENCE.get(row.name)
        vs_start = vs_best = "-"
        if start and start in evals:
            ref_row = Row.parse(start)
            ref_t = main_temperature(ref_row, args, chosen)
            vs_start = fmt_diff(both_intervals(cells(by_seed, t), cells(evals[start], ref_t)))
        if best and row.name in GRPO_ROWS and GRPO_ROWS[row.name][0] == "bc" and best[0] in evals:
            vs_best = fmt_diff(both_intervals(cells(by_seed, t), cells(evals[best[0]], best[1])))
        stage_rows = [run.stages.get(f"{row.stage}/seed{s}", {}) for s in by_seed if s is not None]
        zero = [s["zero_std_share"] for s in stage_rows if s.get("zero_std_share") is not None]
        kl = [s["approx_kl"] for s in stage_rows if s.get("approx_kl") is not None]
        secs = [s["seconds"] for s in stage_rows if "seconds" in s]
        rss = [s["peak_rss_mb"] for s in stage_rows if "peak_rss_mb" in s]
        print(
            f"| {text} | {split} | {greedy:.2f} | {sampled:.2f} | {'greedy' if t == 0 else t} | {per_seed} | "
            f"{kind_cells(by_seed, t)} | "
            f"{vs_start} | {vs_best} | {f'{statistics.fmean(zero):.2f}' if zero else '-'} | "
            f"{f'{statistics.fmean(kl):.5f}' if kl else '-'} | {f'{statistics.fmean(secs):.0f} s' if secs else '-'} | "
            f"{f'{max(rss):.0f} MiB' if rss else '-'} |".replace("nan", "-")
        )
    for mine, control in CONTRASTS:
        if mine in evals and control in evals:
            t, u = (main_temperature(Row.parse(r), args, chosen) for r in (mine, control))
            diff = both_intervals(cells(evals[mine], t), cells(evals[control], u))
            print(f"\n{mine} (T {t}) vs {control} (T {u}) [{INTERVALS}]: {fmt_diff(diff)}")
    unrated = sum(1 for by_seed in evals.values() for rs in by_seed.values() for r in rs if r.get("unrated"))
    print(
        f"\n{unrated} unrated episodes. Settings: {args.steps} GRPO steps at lr {args.lr} ({args.iterations} optimiser "
        f"steps each, beta {args.beta}), temperature {args.temperature}, max {args.max_turns} turns, "
        f"{args.max_new_tokens} tokens a turn, BC {args.bc_epochs} epochs at lr {args.bc_lr}; {machine_line()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, required=True, help="the run folder (stages and evaluations are kept)")
    parser.add_argument("--rows", default="base,bc,grpo,grpo-shuffled", help="comma list of NAME[overrides][@T]")
    parser.add_argument("--split", choices=sorted(SPLITS), default="dev", help="where the rows are evaluated")
    parser.add_argument("--final", action="store_true", help="needed with --split test (which runs once)")
    parser.add_argument("--seeds", default="0,1,2", help="training seeds: every trained row is trained once each")
    parser.add_argument("--train-only", action="store_true", help="train the rows' stages, evaluate nothing")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--iterations", type=int, default=2, help="GRPO optimiser steps per batch of rollouts")
    groups = group_defaults()
    parser.add_argument("--group-size", type=int, default=groups["group_size"], help="GRPO episodes per start")
    parser.add_argument("--groups-per-step", type=int, default=groups["groups_per_step"], help="starts a step")
    parser.add_argument("--resample", type=int, default=groups["resample"], help="extra groups a step may play")
    parser.add_argument("--beta", type=float, default=0.1, help="GRPO's KL weight towards its starting adapter")
    parser.add_argument("--k", type=int, default=8, help="sampled evaluation episodes per instance (0: greedy only)")
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--temperature", type=float, default=0.7, help="training and sampled evaluation")
    parser.add_argument("--bc-epochs", type=float, default=3.0)
    parser.add_argument("--bc-lr", type=float, default=1e-3)
    parser.add_argument("--sr-samples", type=int, default=2, help="SR self-play episodes per train instance")
    parser.add_argument("--train-scenarios", default="verifiable:train")
    parser.add_argument("--kinds", default="", help="evaluate these kinds only (comma list; default every kind)")
    parser.add_argument("--bc-demos", type=int, default=1, help="expert episodes per train instance for BC")
    parser.add_argument("--batch", type=int, default=32, help="the local backend's batch size")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--no-checkpointing", dest="checkpointing", action="store_false",
        help="keep activations (faster training steps, ~5 GB instead of ~1.5; the results are the same)",
    )  # fmt: skip
    parser.add_argument("--eval-seed", type=int, default=0, help="the evaluation's seeds start here")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    rows = [Row.parse(r) for r in args.rows.split(",") if r.strip()]
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    run = Run(args.keep, args)
    args.keep.mkdir(parents=True, exist_ok=True)
    if args.train_only:
        for row in rows:
            for seed in args.seeds:
                if row.name in TRAINED:
                    run.ensure(row, seed)
        return
    if args.split == "test":
        run.guard_test(rows)
    evals = {row.text: run.evaluations(row, args.split, args.seeds) for row in rows}
    if args.split == "test":
        if missing := seeds_missing(evals, args.seeds):
            raise SystemExit(f"no test table until every seed is in: missing {', '.join(missing)}")
        kept = json.loads((args.keep / "test_settings.json").read_text())
        print(
            f"Test record: seeds {kept.get('seeds', 'not recorded')}, rows {kept['rows']}, commit "
            f"{kept.get('commit', 'not recorded')}{' (legacy record: reprint only)' if 'commit' not in kept else ''}\n"
        )
    print_table(args.split, evals, run, args)
    digest = hashlib.sha256(json.dumps(settings_of(args), sort_keys=True).encode()).hexdigest()[:8]
    print(f"settings digest {digest}")


if __name__ == "__main__":
    main()
