"""Rollout throughput of the three ways our episodes reach a trainer, on the same CPU: episodes per minute.

    python benchmarks/trainer_envs.py                  # 96 episodes, 16 OpenEnv clients at once
    python benchmarks/trainer_envs.py --quick          # tiny sizes

Every path plays the same episodes: the verifiable scenarios of ``--scenarios`` (seat 1, ``rule-partner``, the
exact judge), with ``VerifiableExpert`` as the policy (no model: what is measured is the environment's side).

- **our loop**: ``episodes.runner.play`` with the expert in the seat, every episode at once (``asyncio.gather``);
- **TRL env**: ``SocialToolEnv`` as ``GRPOTrainer`` drives it: ``reset(**row)``, one tool call per move (the
  expert's move as its tool call), ``get_reward()``; one rollout after another, as TRL calls tools per sample;
- **OpenEnv**: ``sotopia-env openenv``'s app in a uvicorn thread, ``--clients`` ``SeatClient``s at once over loopback
  WebSocket, each playing its share of the episodes.

Columns: episodes, wall seconds, episodes per minute, and the mean reward (the three must agree: same episodes).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine_line, print_table  # noqa: E402

EXPERT = "sotopia_env.training.experts:VerifiableExpert"


def rows_for(selector: str, episodes: int):
    from sotopia_env.training.seat_rows import seat_rows

    starts = seat_rows(selector, seeds=max(1, episodes // len(seat_rows(selector)) + 1))
    return starts[:episodes]


def our_loop(rows) -> list[float | None]:
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.runner import play
    from sotopia_env.evaluators import make_evaluator
    from sotopia_env.library import load_library
    from sotopia_env.sampler import sample_setup

    library, judge = load_library(), make_evaluator("verifiable", "goal")

    async def one(row):
        setup = sample_setup(library, seed=row.seed, scenario=row.scenario)
        seats = [load_agent(EXPERT), load_agent("rule-partner")]
        log = await play(setup, seats, judge, EnvConfig(max_turns=row.max_turns), seed=row.seed)
        return log.rating.reward(setup.agent_names[0], "goal")

    async def all_of_them():
        return await asyncio.gather(*(one(r) for r in rows))

    return list(asyncio.run(all_of_them()))


def trl_env(rows) -> list[float | None]:
    from sotopia_env.agents.base import reset_agent
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.training.seat_rows import SessionMaker
    from sotopia_env.training.seat_session import BackgroundLoop
    from sotopia_env.training.trl_env import SocialToolEnv, tool_call_message

    env, loop, rewards = SocialToolEnv(SessionMaker()), BackgroundLoop.shared(), []
    for row in rows:
        env.reset(**row.model_dump())
        expert = load_agent(EXPERT)
        reset_agent(expert, env._session.setup, row.seat)
        while not env.done:
            call = tool_call_message(loop.run(expert.act(env.observation)))["tool_calls"][0]["function"]
            getattr(env, call["name"])(**call["arguments"])
        rewards.append(env.get_reward())
    return rewards


def start_openenv(clients: int, selector: str):
    """The server, started before the clock (its imports take seconds): ``(server, thread, port)``."""
    import uvicorn

    from sotopia_env.server.openenv_app import create_openenv_app

    app = create_openenv_app(selector, max_sessions=clients)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, server.servers[0].sockets[0].getsockname()[1]


def openenv(rows, clients: int, port: int) -> list[float | None]:
    from sotopia_env.agents.base import reset_agent
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.library import load_library
    from sotopia_env.sampler import sample_setup
    from sotopia_env.server.openenv_app import SeatAction, SeatClient, as_observation

    library = load_library()

    async def client(share):
        out = []
        async with SeatClient(base_url=f"http://127.0.0.1:{port}") as env:
            for row in share:
                expert = load_agent(EXPERT)
                reset_agent(expert, sample_setup(library, seed=row.seed, scenario=row.scenario), row.seat)
                result = await env.reset(scenario=row.scenario, seat=row.seat, seed=row.seed)
                while not result.done:
                    action = await expert.act(as_observation(result.observation))
                    result = await env.step(SeatAction(**action.to_dict()))
                out.append(result.reward)
        return out

    async def all_clients():
        shares = [rows[k::clients] for k in range(clients)]
        return await asyncio.gather(*(client(s) for s in shares if s))

    return [r for share in asyncio.run(all_clients()) for r in share]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default="verifiable:train")
    parser.add_argument("--episodes", type=int, default=96)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.clients = 6, 3
    rows = rows_for(args.scenarios, args.episodes)
    print(machine_line())
    server, thread, port = start_openenv(args.clients, args.scenarios)
    table = []
    for name, run in [
        ("our loop (play)", lambda: our_loop(rows)),
        ("TRL env (tools)", lambda: trl_env(rows)),
        (f"OpenEnv ({args.clients} WebSocket clients)", lambda: openenv(rows, args.clients, port)),
    ]:
        started = time.perf_counter()
        rewards = run()
        wall = time.perf_counter() - started
        rated = [r for r in rewards if r is not None]
        table.append([name, len(rewards), round(wall, 2), round(60 * len(rewards) / wall, 1),
                      round(statistics.fmean(rated), 3) if rated else "-"])  # fmt: skip
    server.should_exit = True
    thread.join(timeout=10)
    print_table("Rollout throughput (expert policy, rule partner, exact judge)",
                ["path", "episodes", "wall s", "episodes/min", "mean reward"], table)  # fmt: skip


if __name__ == "__main__":
    main()
