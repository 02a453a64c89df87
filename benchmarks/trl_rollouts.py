"""Episodes per minute with an LLM partner and an LLM judge (a loopback server, 200 ms per call): through TRL, and
through our own loop, on the same episodes.

    python benchmarks/trl_rollouts.py                   # 32 episodes, batches of 16, 10 turns each
    python benchmarks/trl_rollouts.py --quick           # 8 episodes, batches of 4, 6 turns

The episodes: the rows of ``--scenarios`` (SOTOPIA scenarios, every seat), the partner a ``loopback`` model spec and
the judge a ``loopback`` LLM judge, both on ``_loopback_server.py --latency 0.2`` in a child process. The policy is
scripted (it speaks the same line every move), so what is measured is the partner turns and the judge calls.

- **our loop**: ``episodes.runner.play`` with the scripted agent in the seat, ``--batch`` episodes in flight at once
  (``run_batch``'s ``concurrency``);
- **TRL rollout_func**: ``training.trl_rollouts.EpisodeRollouts`` called as ``GRPOTrainer`` calls a
  ``rollout_func`` (the generation batch's prompts and the trainer, its ``GRPOConfig``), one generation batch of
  ``--batch`` rollouts after another, the policy a ``ScriptedToolPolicy`` saying the same line as a tool call;
- **TRL environment_factory**: ``SocialToolEnv`` driven as TRL 1.16's ``GRPOTrainer`` drives it
  (``_generate_and_score_completions`` and ``_tool_call_loop``): ``reset`` sample after sample, then per iteration
  every sample's tool call in turn, then ``get_reward`` sample after sample. The path before ``rollout_func``.

Columns: episodes, wall seconds, episodes/min, the share of our loop's episodes/min, the most calls the server had in
flight at once, and the mean reward (equal across paths: the same episodes).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import LoopbackProcess, machine_line, print_table  # noqa: E402

WORDS = "I hear you. Could we find a way that works for both of us?"


def rows_for(selector: str, episodes: int, max_turns: int):
    from sotopia_env.training.seat_rows import seat_rows

    rows = seat_rows(selector, partner="loopback", judge="loopback", max_turns=max_turns)
    return rows[:episodes]


def our_loop(rows, maker, batch: int) -> list[float | None]:
    from sotopia_env.actions import ActionType, AgentAction
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.agents.scripted import ScriptedAgent
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.runner import play
    from sotopia_env.sampler import sample_setup

    async def one(row, gate):
        async with gate:
            setup = sample_setup(maker.library, seed=row.seed, scenario=row.scenario)
            specs = row.partner_specs(setup.scenario.num_agents)
            others = iter(load_agent(spec, api_base=maker.api_base) for spec in specs)
            policy = ScriptedAgent([], after=AgentAction(action_type=ActionType.speak, argument=WORDS))
            seats = [policy if s == row.seat else next(others) for s in range(setup.scenario.num_agents)]
            config = EnvConfig(max_turns=row.max_turns)
            log = await play(setup, seats, maker.judge(row.evaluator), config, seed=row.seed)
            return log.rating.reward(setup.agent_names[row.seat], "goal") if log.rating is not None else None

    async def all_of_them():
        gate = asyncio.Semaphore(batch)
        return await asyncio.gather(*(one(r, gate) for r in rows))

    return list(asyncio.run(all_of_them()))


class _Trainer:
    """What a ``rollout_func`` reads of the trainer: its arguments."""

    def __init__(self, args) -> None:
        self.args = args


def trl_rollout_func(maker, batch: int, max_turns: int):
    """The rollout function and the generation batches' prompts (built before the clock starts: the dataset renders
    each seat's opening); returns the run."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from sotopia_env.embedded_models import resolve_model_path
    from sotopia_env.training.trl_rollouts import ScriptedToolPolicy, episode_rollouts, rollout_dataset, speak_call

    def prepared(rows):
        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m"))
        rollouts = episode_rollouts(maker, tokenizer)
        rollouts.policy = ScriptedToolPolicy(rollouts.tokenizer, speak_call(WORDS))
        trainer = _Trainer(
            GRPOConfig(
                output_dir="/tmp/trl-rollouts-bench",
                max_completion_length=16384,
                max_tool_calling_iterations=max_turns,
                report_to="none",
                use_cpu=True,
            )  # fmt: skip
        )
        prompts = [r["prompt"] for r in rollout_dataset(rows, maker)]

        def run() -> list[float | None]:
            rewards: list[float | None] = []
            for start in range(0, len(prompts), batch):
                rewards += rollouts(prompts[start : start + batch], trainer)["episode_reward"]
            return rewards

        return run

    return prepared


def trl_env_factory(rows, maker, batch: int, max_turns: int) -> list[float | None]:
    from sotopia_env.training.trl_env import tool_env_factory

    factory, rewards = tool_env_factory(maker), []
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        envs = [factory() for _ in chunk]
        for env, row in zip(envs, chunk, strict=True):
            env.reset(**row.model_dump())
        for _ in range(max_turns):
            moving = [env for env in envs if not env.done]
            if not moving:
                break
            for env in moving:  # sample after sample, as TRL's _tool_call_loop calls sync tools
                env.speak(WORDS)
        rewards += [env.get_reward() for env in envs]  # as TRL calls get_reward
    return rewards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default="hard")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--batch", type=int, default=16, help="a generation batch (our loop: episodes in flight)")
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--skip-env-factory", action="store_true", help="leave out the slow environment_factory row")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.batch, args.max_turns = 8, 4, 6

    from sotopia_env.training.seat_rows import SessionMaker

    rows = rows_for(args.scenarios, args.episodes, args.max_turns)
    print(machine_line())
    table = []
    with LoopbackProcess(latency_s=args.latency) as server:
        maker = SessionMaker(api_base=server.base_url)
        paths = [
            ("our loop (runner.play)", lambda: our_loop(rows, maker, args.batch)),
            ("TRL rollout_func", trl_rollout_func(maker, args.batch, args.max_turns)(rows)),
        ]
        if not args.skip_env_factory:
            paths.append(("TRL environment_factory", lambda: trl_env_factory(rows, maker, args.batch, args.max_turns)))
        base = None
        for name, run in paths:
            server.reset()
            started = time.monotonic()
            rewards = run()
            wall = time.monotonic() - started
            per_min = len(rows) / wall * 60
            base = base or per_min
            rated = [r for r in rewards if r is not None]
            mean = statistics.mean(rated) if rated else None
            stats = server.stats()
            table.append([name, len(rows), wall, per_min, f"{per_min / base:.0%}", stats["max_in_flight"], mean])
    print_table(
        f"TRL rollouts with an LLM partner and judge ({args.latency * 1000:.0f} ms per call, {args.max_turns} turns, "
        f"batch {args.batch})",
        ["path", "episodes", "wall s", "episodes/min", "of our loop", "max in flight", "mean goal"],
        table,
    )


if __name__ == "__main__":
    main()
