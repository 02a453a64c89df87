"""The games' heuristic and oracle seats side by side (issue #57): each role's win rate, counted in games.

    python benchmarks/game_baselines.py [--games werewolf,negotiation] [--splits dev,test] [--per-scenario 40]

Per game, split and role: the role's seat(s) played by ``rule-player`` (the heuristic: every seat a rule player)
and by ``oracle-player`` (handed every player's role; the other seats rule players), over every scenario of the
split and ``--per-scenario`` setups each (``sample_setups(..., seed=0)``, episode seed = the setup's index, as
``tests/test_game_baselines.py`` plays them). Win rate = games won / games, with a Wilson 95% interval over games
(``episodes.game_report.role_win_rates``: a role's seats in one game count that game once); mean goal = the mean
over games of the role's seats' goal (0..10). No model is called. ``tests/test_game_oracle.py`` holds the
oracle's margin on game:dev for the wolves and the proposer.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence

import _common  # noqa: F401  (puts the repository on sys.path)
from _common import machine_line, print_table

from sotopia_env.agents.game_players import OraclePlayer, RulePlayer
from sotopia_env.episodes.game_report import role_win_rates
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import VerifiableJudge
from sotopia_env.library import Library, load_library
from sotopia_env.sampler import sample_setups


def play_games(library: Library, game: str, split: str, per_scenario: int, oracle_role: str = "") -> list[EpisodeLog]:
    """Every ``game`` scenario of ``split``, ``per_scenario`` setups each; ``oracle_role``'s seats (none: "") played
    by ``oracle-player``, the others by ``rule-player``."""
    logs = []
    judge = VerifiableJudge()
    for scenario in library.select(f"game:{split}"):
        if scenario.game.rules != game:
            continue
        roles = [scenario.game.role(seat).name for seat in range(len(scenario.game.seats))]
        for i, setup in enumerate(sample_setups([scenario], library, per_scenario, seed=0)):
            agents = [OraclePlayer() if role == oracle_role else RulePlayer() for role in roles]
            log = asyncio.run(play(setup, agents, judge, seed=i))
            if log.rating is None or not log.rating.rated:
                raise RuntimeError(f"{scenario.id} seed {i}: unrated ({log.rating})")
            logs.append(log)
    return logs


def mean_goal(logs: Sequence[EpisodeLog], role: str) -> float:
    """The mean over games of ``role``'s seats' goal in each."""
    per_game = []
    for log in logs:
        game = log.setup.scenario.game
        goals = [
            log.rating.of(agent.name).scores["goal"].score
            for seat, agent in enumerate(log.agents)
            if game.role(seat).name == role
        ]
        if goals:
            per_game.append(statistics.fmean(goals))
    return statistics.fmean(per_game) if per_game else float("nan")


def role_row(logs: Sequence[EpisodeLog], model: str, role: str) -> list:
    (row,) = [r for r in role_win_rates(logs) if r.model == model and r.role == role]
    return [model, row.games, f"{row.wins}/{row.games}", f"{row.rate:.2f} [{row.low:.2f}, {row.high:.2f}]"] + [
        round(mean_goal(logs, role), 2)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", default="werewolf,negotiation", help="comma-separated rule sets")
    parser.add_argument("--splits", default="dev,test")
    parser.add_argument("--per-scenario", type=int, default=40, help="setups (= games) per scenario")
    args = parser.parse_args()
    library = load_library()
    rows = []
    started = time.perf_counter()
    for game in [g for g in args.games.split(",") if g]:
        for split in [s for s in args.splits.split(",") if s]:
            heuristic = play_games(library, game, split, args.per_scenario)
            if not heuristic:
                continue
            spec = heuristic[0].setup.scenario.game
            roles = [role.name for role in spec.roles]
            for role in roles:
                oracle = play_games(library, game, split, args.per_scenario, oracle_role=role)
                for logs, model in ((heuristic, RulePlayer.model), (oracle, OraclePlayer.model)):
                    rows.append([game, split, role, *role_row(logs, model, role)])
    seconds = time.perf_counter() - started
    print_table(
        "Games: each role's seats played by the heuristic (rule-player) and by the oracle (oracle-player)",
        ["game", "split", "role", "role's seats", "games", "won", "win rate [Wilson 95%]", "mean goal"],
        rows,
        note=f"Other seats: rule-player. {args.per_scenario} setups per scenario, seeds 0..{args.per_scenario - 1}; "
        f"{seconds:.0f} s. {machine_line()}",
    )


if __name__ == "__main__":
    main()
