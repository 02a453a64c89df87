"""Games over SocialEnv: the PettingZoo contract with action masks, the invariants, rule players, the judge."""

from __future__ import annotations

import asyncio
import random
import re

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test
from typer.testing import CliRunner

from sotopia_env.actions import ACTION_TYPES, AgentAction
from sotopia_env.agents.game_players import RulePlayer
from sotopia_env.cli.main import app
from sotopia_env.env import EnvConfig, SocialEnv
from sotopia_env.episodes.game_report import wilson
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import VerifiableJudge
from sotopia_env.sampler import sample_setups
from sotopia_env.training.dataset import replay
from sotopia_env.transcript import MODERATOR

NONE = {"action_type": "none"}


def _speak(text: str) -> dict:
    return {"action_type": "speak", "argument": text}


def _setup(library, scenario_id: str, seed: int = 0):
    (scenario,) = library.select([scenario_id])
    return sample_setups([scenario], library, 1, seed=seed)[0]


def _roles(setup) -> dict[str, str]:
    return {n: setup.scenario.game.role(i).name for i, n in enumerate(setup.agent_names)}


def _masked_random_play(env: SocialEnv, seed: int) -> list:
    """Every live seat samples an action type from its info's mask and an argument from its choices."""
    rng = random.Random(seed)
    obs, infos = env.reset(seed=seed)
    while env.agents:
        actions = {}
        for seat in env.agents:
            mask = infos[seat]["action_mask"]
            kinds = [k for k, on in zip(ACTION_TYPES, mask, strict=True) if on]
            kind = rng.choice(kinds)
            choices = obs[seat]["choices"]
            argument = rng.choice(choices) if choices else ("I have a hunch." if kind != "none" else "")
            actions[seat] = {"action_type": kind, "argument": argument}
        obs, _, _, _, infos = env.step(actions)
    return env.turns


def test_parallel_api_on_six_player_werewolf(library) -> None:
    env = SocialEnv(setup=_setup(library, "werewolf-ashford"), evaluator=VerifiableJudge())
    parallel_api_test(env, num_cycles=200)
    env = SocialEnv(setup=_setup(library, "werewolf-ashford"), evaluator=VerifiableJudge())
    obs, infos = env.reset(seed=0)
    for seat in env.agents:
        assert infos[seat]["action_mask"].dtype == np.int8 and infos[seat]["phase"] == "seer"
        assert list(infos[seat]["action_mask"]) == list(obs[seat]["available_actions"])
        assert env.observation_space(seat).contains(obs[seat])
    turns = _masked_random_play(env, seed=3)  # masked sampling never makes an invalid move
    assert env.termination_reason == "game_over" and not any(t.action.error for t in turns)
    assert env.rating is not None and env.rating.rated


def test_the_dead_never_act_and_the_living_act_in_their_phase(library) -> None:
    setup = _setup(library, "werewolf-ashford")
    env = SocialEnv(setup=setup, config=EnvConfig(max_agent_errors=99))
    roles = {f"agent_{i}": role for i, role in enumerate(_roles(setup).values())}  # by seat, as the env's ids
    obs, infos = env.reset(seed=0)
    assert {s: infos[s]["role"] for s in env.agents} == roles
    dead: set[str] = set()
    while env.agents:
        acting = [n for n in env.agents if infos[n]["acting"]]
        assert not set(acting) & dead
        phase = infos[env.agents[0]]["phase"]
        if phase == "night":
            assert {roles[n] for n in acting} == {"werewolf"}
        for name in dead:
            assert list(infos[name]["action_mask"]) == [int(k == "none") for k in ACTION_TYPES]
            assert obs[name]["choices"] == ()
        actions = {n: NONE for n in env.agents}
        for name in acting:
            choices = obs[name]["choices"]
            actions[name] = {"action_type": "action", "argument": choices[0]} if choices else _speak("I trust nobody.")
        for name in dead:  # a dead player's move is ignored: it never reaches the transcript
            actions[name] = {"action_type": "speak", "argument": "Boo!"}
        obs, _, _, _, infos = env.step(actions)
        dead |= {env.seat_of(n) for n in setup.agent_names if n not in env.game.alive}
    assert dead and not any(t.action.argument == "Boo!" for t in env.turns)
    assert not any(t.action.error for t in env.turns)  # every living move above was a valid one


def test_a_vote_for_the_dead_or_an_unknown_player_is_invalid(library) -> None:
    setup = _setup(library, "werewolf-ashford")
    names, roles = setup.agent_names, _roles(setup)
    wolves = [n for n in names if roles[n] == "werewolf"]
    seer = next(n for n in names if roles[n] == "seer")
    victim = next(n for n in names if roles[n] == "villager")
    env = SocialEnv(setup=setup, config=EnvConfig(max_agent_errors=99))
    env.reset(seed=0)
    idle = {s: NONE for s in env.agents}
    env.step(idle | {env.seat_of(seer): {"action_type": "action", "argument": f"inspect {wolves[0]}"}})
    kill = {"action_type": "action", "argument": f"kill {victim}"}
    env.step(idle | {env.seat_of(w): kill for w in wolves})
    assert victim not in env.game.alive
    speaker = env.acting[0]
    assert env.game.phase.name == "day"
    env.step(idle | {speaker: {"action_type": "action", "argument": f"vote for {wolves[1]}"}})
    assert "not allowed in the day phase" in env._last_error[env.name_of(speaker)]  # a vote is no day move
    while env.game.phase.name == "day":
        env.step(idle | {env.acting[0]: _speak("Let us vote.")})
    voter = next(env.name_of(s) for s in env.acting if env.name_of(s) != victim)
    for bad in (f"vote for {victim}", "vote for Nobody Atall", f"vote for {voter}", "vote"):
        assert "is not a valid choice in the vote phase" in env.game.problem(
            voter, AgentAction(action_type="action", argument=bad)
        )
    before = env.errors[voter]
    env.step(idle | {env.seat_of(voter): {"action_type": "action", "argument": f"vote for {victim}"}})
    assert "not a valid choice" in env._last_error[voter] and env.errors[voter] == before + 1


def test_whispers_team_channels_and_the_seers_result_never_leak(library) -> None:
    setup = _setup(library, "werewolf-ashford")
    roles = _roles(setup)
    agents = [RulePlayer() for _ in setup.agent_names]
    log = asyncio.run(play(setup, agents, VerifiableJudge()))
    private = [t for t in log.turns if t.audience is not None]
    assert any(t.agent == MODERATOR and "Your inspection" in t.action.argument for t in private)
    assert any(t.action.argument.startswith("kill ") for t in private)
    for turn, observation in replay(log):  # each move with what its agent saw: the dataset builder's path
        seen = "\n".join(h.render() for h in observation.history)
        for t in private:
            if t.turn < turn.turn and turn.agent not in t.audience:
                assert t.action.argument not in seen, (turn.agent, roles[turn.agent], t.action.argument)
    villagers = [n for n in setup.agent_names if roles[n] == "villager"]
    kills = [t for t in log.turns if t.action.argument.startswith("kill ")]
    assert kills and all(not set(villagers) & set(t.audience) for t in kills)


def test_same_seed_same_game(library) -> None:
    setup = _setup(library, "undercover-coffee-tea")
    runs = []
    for _ in range(2):
        env = SocialEnv(setup=setup, evaluator=VerifiableJudge())
        runs.append([t.model_dump() for t in _masked_random_play(env, seed=11)])
    assert runs[0] == runs[1]
    env = SocialEnv(setup=setup, evaluator=VerifiableJudge())
    assert [t.model_dump() for t in _masked_random_play(env, seed=12)] != runs[0]


def _winning_team(log, roles: dict[str, str], villains: str, team_of: dict[str, str]) -> str:
    """The team the rules give the win, from the transcript alone: the villains while one of them is alive at
    the end (they reached parity, or time ran out), else the others."""
    said = " ".join(t.action.argument for t in log.turns if t.agent == MODERATOR)
    out = {n for n in roles if f"{n} is eliminated" in said or f"{n} is found dead" in said or f"{n} said" in said}
    return villains if any(team_of[roles[n]] == villains for n in roles if n not in out) else "good"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rule_players_play_werewolf_to_the_winner_the_rules_give(library, seed) -> None:
    """Seeded rule players: whoever wins, the judge's winners are the team the transcript gives (a werewolf
    alive at the end: the wolves), the roles revealed are the real ones, and the dead never act again."""
    setup = _setup(library, "werewolf-ashford", seed)
    roles = _roles(setup)
    log = asyncio.run(play(setup, [RulePlayer() for _ in roles], VerifiableJudge(), seed=seed))
    assert log.termination_reason == "game_over" and not any(log.agent_errors.values())
    said = [t.action.argument for t in log.turns if t.agent == MODERATOR]
    for n, role in roles.items():
        if any(f"{n} is eliminated" in s or f"{n} is found dead" in s for s in said):
            assert any(f"{n} was a {role}." in s for s in said)
    winners = _winning_team(log, roles, "wolves", {"werewolf": "wolves", "seer": "good", "villager": "good"})
    ratings = log.rating.ratings
    for n, role in roles.items():
        won = (role == "werewolf") == (winners == "wolves")
        assert ratings[n].success is won and ratings[n].scores["goal"].score == (10 if won else 0)


def test_rule_players_play_undercover_and_negotiate_by_the_rules(library) -> None:
    for seed in range(3):
        setup = _setup(library, "undercover-coffee-tea", seed)
        log = asyncio.run(play(setup, [RulePlayer() for _ in setup.agent_names], VerifiableJudge(), seed=seed))
        roles = _roles(setup)
        winners = _winning_team(log, roles, "undercover", {"undercover": "undercover", "civilian": "good"})
        expected = {n: (r == "undercover") == (winners == "undercover") for n, r in roles.items()}
        assert {n: r.success for n, r in log.rating.ratings.items()} == expected
    goals = set()
    for seed in range(6):  # reserves 20, 30, 10: a deal pays the accepted proposal, no deal the reserves
        setup = _setup(library, "negotiation-prize-money", seed)
        p = setup.agent_names
        log = asyncio.run(play(setup, [RulePlayer() for _ in p], VerifiableJudge(), seed=seed))
        said = [t.action.argument for t in log.turns if t.agent == MODERATOR]
        proposals = [s for s in said if " proposes: " in s]
        if "Everyone accepted: the deal is done." in said:
            split = proposals[-1].split(" proposes: ")[1]
            payoffs = [int(re.search(rf"{re.escape(n)} (\d+)", split).group(1)) for n in p]
        else:
            payoffs = [20, 30, 10]
        expected = [
            max(0, min(10, int(10 * (pay - res) / 40 + 0.5))) for pay, res in zip(payoffs, [20, 30, 10], strict=True)
        ]
        scores = [log.rating.ratings[n].scores["goal"].score for n in p]
        assert scores == expected, (said, scores)
        goals.add(tuple(scores))
    assert len(goals) > 1  # seeded players: the outcome is not the same every time


def test_a_game_cut_short_is_unrated_never_zero(library) -> None:
    setup = _setup(library, "werewolf-ashford")
    env = SocialEnv(setup=setup, evaluator=VerifiableJudge())  # one agent error ends the episode
    env.reset(seed=0)
    seer = env.seat_of(next(n for n, r in _roles(setup).items() if r == "seer"))
    _, rewards, terms, _, infos = env.step({s: NONE for s in env.agents} | {seer: "not json"})
    assert env.termination_reason == "agent_error" and all(terms.values())
    assert all(np.isnan(r) for r in rewards.values())
    assert "did not reach its end (agent_error)" in infos[seer]["evaluation"]["error"]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda g: g["seats"].__setitem__(0, "wolf"), "seats[0]: unknown role 'wolf'"),
        (lambda g: g["phases"][0].__setitem__("actors", []), "a phase needs actors"),
        (lambda g: g["phases"][1].__setitem__("actors", ["sheriff"]), "phases[1].actors: unknown role 'sheriff'"),
        (lambda g: g["seats"].pop(), "game.seats: 5 roles for 6 seats"),
    ],
)
def test_a_broken_game_fails_validate_with_one_line_naming_file_and_field(library, tmp_path, edit, field) -> None:
    import yaml

    (scenario,) = library.select(["werewolf-ashford"])
    data = scenario.model_dump(mode="json")
    data["id"] = "my-werewolf"
    edit(data["game"])
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [data]}))
    result = CliRunner().invoke(app, ["scenarios", "validate", str(path)])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and field in lines[0], result.output


@pytest.mark.model
def test_a_game_on_the_embedded_model_takes_only_valid_moves(library) -> None:
    """A werewolf's seat on SmolLM2-135M (a night kill, day talk and a vote), constrained by the narrowed schema;
    the others are rule players. Every move the model makes is valid, and the game reaches its judged end."""
    from sotopia_env.agents.llm import LLMAgent
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.backends.local import LocalBackend

    setup = _setup(library, "werewolf-ashford")
    backend = LocalBackend.from_spec("smollm2-135m")
    settings = GenerationSettings(temperature=0.0, max_new_tokens=40, repetition_penalty=1.2)
    agents = [LLMAgent(backend, settings) if seat == 0 else RulePlayer() for seat in range(6)]
    log = asyncio.run(play(setup, agents, VerifiableJudge()))
    names, roles = setup.agent_names, _roles(setup)
    model_moves = [t for t in log.turns if t.agent == names[0]]
    assert log.termination_reason == "game_over" and not any(log.agent_errors.values()), log.agent_errors
    assert {t.action.action_type.value for t in model_moves} >= {"action", "speak"}
    for t in model_moves:
        if t.action.action_type.value == "action":
            verb, _, target = t.action.argument.partition(" for " if t.action.argument.startswith("vote") else " ")
            assert target in names and verb in ("vote", "kill", "inspect"), t.action.argument
    assert roles[names[0]] == "werewolf" and any(t.action.argument.startswith("kill ") for t in model_moves)
    assert log.rating.rated and all(log.rating.of(n).success is not None for n in names)


def test_cli_runs_a_game_with_one_spec_or_one_per_seat_and_benchmarks_roles(tmp_path) -> None:
    import json

    runner = CliRunner()
    result = runner.invoke(app, ["run", "--scenario", "undercover-coffee-tea", "--agents", "rule-player", "--no-store"])
    assert result.exit_code == 0, result.output
    assert "Game master said" in result.output and "ended: game_over" in result.output
    assert "ratings by verifiable" in result.output  # a game's default judge is its exact outcome
    result = runner.invoke(app, ["run", "--scenario", "werewolf-ashford", "--agents", "rule-player,human"])
    assert result.exit_code == 1 and "--agents: 2 specs for 6 seats" in result.output
    result = runner.invoke(app, ["run", "--scenario", "verifiable-bargaining-bike", "--agent2", "rule-player"])
    assert result.exit_code == 1 and "rule-player plays games only" in result.output
    out = tmp_path / "report.json"
    store = f"sqlite:///{tmp_path / 'games.db'}"
    args = ["benchmark", "--model", "rule-player", "--partner", "rule-player", "--evaluator", "verifiable"]
    result = runner.invoke(app, [*args, "--scenarios", "undercover:test", "--store", store, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "game outcomes by role" in result.output
    roles = {(r["game"], r["role"]): r for r in json.loads(out.read_text())["roles"]}
    civilian, odd = roles[("undercover", "civilian")], roles[("undercover", "undercover")]
    assert (civilian["games"], odd["games"]) == (3, 3)  # three test games, counted once a role (not per player)
    assert civilian["wins"] == odd["games"] - odd["wins"]  # one team wins each game
    assert (civilian["low"], civilian["high"]) == pytest.approx(wilson(civilian["wins"], 3))
    result = runner.invoke(app, ["report", "--tag", "benchmark-rule-player-vs-rule-player", "--store", store])
    won = f"{civilian['wins']}/3"
    assert result.exit_code == 0 and "game outcomes by role" in result.output and won in result.output


def test_saying_ones_own_word_puts_one_out(library) -> None:
    setup = _setup(library, "undercover-coffee-tea")
    names, roles = setup.agent_names, _roles(setup)
    odd = next(n for n in names if roles[n] == "undercover")
    env = SocialEnv(setup=setup, evaluator=VerifiableJudge())
    env.reset(seed=0)
    while not env.game.over and env.game.phase.name == "describe":
        speaker = env.acting[0]
        line = "It's a TEA, of course." if env.name_of(speaker) == odd else "Something warm to drink."
        env.step({s: NONE for s in env.agents} | {speaker: _speak(line)})
    assert odd not in env.game.alive and not any(t.action.error for t in env.turns)
    assert env.termination_reason == "game_over"  # the only undercover player is out: the civilians win
    assert all(env.rating.of(n).success == (roles[n] == "civilian") for n in names)
