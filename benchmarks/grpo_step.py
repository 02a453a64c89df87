"""Episode-GRPO step time: rollouts and update, per step, on SmolLM2-135M (CPU by default).

    python benchmarks/grpo_step.py                       # 2 steps of 4 groups x 4 episodes, 6 turns, 40 tokens a turn
    python benchmarks/grpo_step.py --adapter runs/bc     # from a BC adapter (the stage GRPO starts from)
    python benchmarks/grpo_step.py --quick               # 1 step of 1 group x 2 episodes, 2 turns (the smoke test)

    python benchmarks/grpo_step.py --adapter runs/bc --prefix-batch 1   # the update one sequence at a time

The same settings before and after a change: run it once on each version of the code and compare the rows. For
an older version, install it apart (``pip install --no-deps --target OLD <checkout>``) and run copies of this
file and ``_common.py`` from a folder outside the repository (``_common`` puts the repository first on the
path) with ``PYTHONPATH=OLD``. Rollouts are seeded, so two runs of one version train on the same sequences.
``dense_reward`` gives partial credit, so that groups from the base model differ and the update has work to do.
Not a test: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import tempfile

import _common
from _common import machine_line, print_table

_ = _common


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--adapter", default=None, help="a trained adapter dir to start from")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--prefix-batch", type=int, default=8, help="sequences sharing a prompt prefix per forward")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--label", default="this code")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.groups, args.group_size, args.turns, args.tokens = 1, 1, 2, 2, 16
    import torch

    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig, train_episode_grpo

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as out:
        config = EpisodeGRPOConfig(
            base_model=args.model,
            init_adapter=args.adapter,
            output_dir=out,
            max_steps=args.steps,
            group_size=args.group_size,
            groups_per_step=args.groups,
            max_turns=args.turns,
            max_completion_length=args.tokens,
            dense_reward=5.0,
            dynamic_sampling=False,
            prefix_batch=args.prefix_batch,
            save_steps=10_000,
            progress=False,
            seed=0,
        )
        result = train_episode_grpo(config)
    rows = [
        (
            args.label,
            row["step"],
            row["episodes"],
            row.get("trained_sequences", "-"),
            row.get("rollout_seconds", 0.0),
            row.get("update_seconds", 0.0),
            row.get("seconds", 0.0),
            row.get("peak_rss_mb", 0),
        )
        for row in result.log
    ]
    print(f"# Episode-GRPO step time ({args.model}{' + ' + args.adapter if args.adapter else ''})\n\n{machine_line()}")
    columns = ["code", "step", "episodes", "trained seqs", "rollouts s", "update s", "step s", "peak RSS MB"]
    print_table("episode-GRPO steps", columns, rows)


if __name__ == "__main__":
    main()
