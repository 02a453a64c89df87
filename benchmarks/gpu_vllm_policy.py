"""Part 3 of ``gpu_smoke.sh``: a trained policy served by a real vLLM (``training/policy_server.py``, its default
command: the base model with the policy's LoRA), every ``verifiable:test`` instance played greedily through it
against the rule partner. Prints the server's start-up time, episodes per minute and the success rate.

    python benchmarks/gpu_vllm_policy.py POLICY_DIR LOG_FILE      # POLICY_DIR: a trained stage (a model spec)

Needs a GPU and ``vllm``; not a test.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import _common
from _common import machine_line, print_table

_ = _common


def main() -> None:
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.agents.rule_partners import RulePartner
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.episodes.runner import play
    from sotopia_env.evaluators import VerifiableJudge
    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig, make_rollout
    from sotopia_env.training.policy_server import SERVED_MODEL, PolicyServer, PolicyServerConfig

    if len(sys.argv) != 3:
        raise SystemExit("usage: gpu_vllm_policy.py POLICY_DIR LOG_FILE")
    policy, log_file = sys.argv[1], Path(sys.argv[2])
    rollout = make_rollout(EpisodeGRPOConfig(scenarios="verifiable:test", max_turns=6), policy)
    settings = GenerationSettings(temperature=0.0, max_new_tokens=40, seed=0)
    t0 = time.perf_counter()
    with PolicyServer(PolicyServerConfig(), policy, log_file) as server:
        started = time.perf_counter() - t0

        async def one(setup):
            agent = load_agent(SERVED_MODEL, settings=settings, api_base=server.api_base)
            specs = [SERVED_MODEL, "rule-partner"]
            return await play(setup, [agent, RulePartner()], VerifiableJudge(), rollout.env, specs, seed=0)

        async def every_instance():
            return await asyncio.gather(*(one(setup) for setup in rollout.setups))

        t1 = time.perf_counter()
        logs = asyncio.run(every_instance())
        played = time.perf_counter() - t1
    won = sum(1 for log in logs if log.rating and log.rating.ratings[log.setup.agent_names[0]].success)
    print_table(
        "The policy through vLLM (verifiable:test, greedy, against the rule partner)",
        ["episodes", "server start", "playing", "episodes/min", "won"],
        [[len(logs), f"{started:.0f} s", f"{played:.1f} s", f"{60 * len(logs) / played:.0f}", f"{won}"]],
        note=machine_line(),
    )


if __name__ == "__main__":
    main()
