"""The prompts (``sotopia_env.prompt``): the chat prompt's shape, one function for agents and training data, the
prompt a model is given (per model, and a trained model's own), the protocol card's record of it, and a real
episode of the embedded model under its own prompt, measured as ``benchmarks/episode_quality.py`` measures."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.agents.llm import LLMAgent
from sotopia_env.backends.resolve import prompt_for_model
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.env import EnvConfig, SocialEnv
from sotopia_env.episodes.protocol import cards_of, prompt_record
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import RuleBasedEvaluator
from sotopia_env.model_ref import MODEL_REF, model_prompt, write_model_ref
from sotopia_env.observation import Observation
from sotopia_env.prompt import CHAT, SOTOPIA, render_prompt
from sotopia_env.training.dataset import collect_examples, dataset_prompt, to_hf_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from episode_quality import SCENARIOS, talk_figures  # noqa: E402  (the benchmark's own measure)


def plain(goal: str) -> str:
    """A goal as the chat prompt says it: without SOTOPIA's tags (<extra_info>, <strategy_hint>)."""
    return re.sub(r"</?[a-z_]+>", "", goal)


def say(text: str) -> str:
    return json.dumps({"action_type": "speak", "argument": text})


def observations_after(setup, lines: list[str]) -> list[dict]:
    """Each turn's observations, by character name, while the seats speak ``lines`` in turn (round-robin)."""
    env = SocialEnv(setup=setup)
    obs, infos = env.reset(seed=0)
    seen = [obs]
    for line in lines:
        acting = next(s for s in env.agents if infos[s]["acting"])
        actions = {s: AgentAction(action_type=ActionType.none) for s in env.agents}
        actions[acting] = AgentAction(action_type=ActionType.speak, argument=line)
        obs, _, _, _, infos = env.step(actions)
        seen.append(obs)
    return [{env.name_of(seat): o for seat, o in step.items()} for step in seen]


def test_chat_prompt_holds_the_seats_character_and_own_goal_only(two_friends) -> None:
    me, other = two_friends.characters
    (obs, *_) = observations_after(two_friends, [])
    system, first = render_prompt(obs[me.name], CHAT)
    assert system["role"] == "system" and first == {"role": "user", "content": "(You start.)"}
    text = system["content"]
    assert text.startswith(f"You are {me.name}, a {me.age}-year-old")
    goals = [plain(g) for g in two_friends.scenario.goals]
    assert two_friends.scenario.scenario in text and f"Your goal: {goals[0]}" in text
    assert goals[1] not in text  # the partner's goal,
    assert other.secret not in text and me.secret not in text  # and secrets, are not said
    topic = two_friends.scenario.topic  # what to talk about, and an opening on it, in the reply's JSON
    assert f"says next to {other.name} about the {topic}:" in text and "respond" not in text.lower()
    assert text.endswith(f'{{"action_type": "speak", "argument": "I was hoping we could talk about the {topic}."}}')
    partner_system = render_prompt(obs[other.name], CHAT)[0]["content"]
    assert goals[1] in partner_system and goals[0] not in partner_system


def test_a_stranger_is_not_named(library, setup_at) -> None:
    setup = setup_at(library, "stranger")
    me, other = setup.characters
    (obs, *_) = observations_after(setup, [])
    system = render_prompt(obs[me.name], CHAT)[0]["content"]
    assert other.first_name not in system and "the other person, a stranger to you" in system


def test_the_conversation_is_chat_turns_and_each_prompt_extends_the_last(two_friends) -> None:
    me, other = (c.name for c in two_friends.characters)
    seen = observations_after(two_friends, ["Hi, got a minute?", "Sure, what is it?", "About Saturday."])
    at_turn_2 = render_prompt(seen[2][me], CHAT)
    assert at_turn_2[1:] == [
        {"role": "user", "content": "(You start.)"},
        {"role": "assistant", "content": say("Hi, got a minute?")},  # its own move, as the JSON it wrote
        {"role": "user", "content": "Sure, what is it?"},  # the partner's words
    ]
    partner_at_3 = render_prompt(seen[3][other], CHAT)
    assert [m["role"] for m in partner_at_3] == ["system", "user", "assistant", "user"]
    assert partner_at_3[1]["content"] == "Hi, got a minute?" and partner_at_3[3]["content"] == "About Saturday."
    assert render_prompt(seen[0][me], CHAT) == at_turn_2[:2]  # a prefix cache recomputes only the new turns
    assert render_prompt(seen[1][other], CHAT) == partner_at_3[:2]


def test_a_game_is_prompted_with_its_rules(library) -> None:
    from sotopia_env.sampler import sample_setup

    setup = sample_setup(library, seed=0, scenario="werewolf-ashford")
    obs, _ = SocialEnv(setup=setup).reset(seed=0)
    name = "agent_0"
    assert Observation.from_env(obs[name]).phase
    assert render_prompt(obs[name], CHAT) == render_prompt(obs[name], SOTOPIA)


def test_unknown_prompt_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"unknown prompt 'tiny' \(known: chat, sotopia, tools\)"):
        LLMAgent(ScriptedBackend([]), prompt="tiny")


def test_training_examples_are_exactly_what_the_agent_was_prompted_with(two_friends) -> None:
    """The dataset builder renders with the agent's function: each example of a seat is the request that seat's
    agent sent on that turn, message for message."""
    backends = [ScriptedBackend([say(f"line {k} of seat {s}") for k in range(3)]) for s in range(2)]
    agents = [LLMAgent(b, prompt=CHAT) for b in backends]
    log = asyncio.run(play(two_friends, agents, RuleBasedEvaluator(), EnvConfig(max_turns=5), ["m", "m"], seed=0))
    assert log.status == "rated"
    examples, _ = collect_examples([log], prompt=CHAT)
    for seat, backend in enumerate(backends):
        sent = [r.messages for r in backend.requests]
        assert [e.prompt for e in examples if e.seat == seat] == sent and len(sent) >= 2
    assert {e.prompt_name for e in examples} == {CHAT}
    assert dataset_prompt(to_hf_dataset(examples)) == CHAT
    under_sotopia, _ = collect_examples([log])  # another prompt, other messages
    assert [e.prompt for e in under_sotopia] != [e.prompt for e in examples]
    with pytest.raises(ValueError, match="mixes prompts"):
        dataset_prompt(to_hf_dataset(examples + under_sotopia))


def test_each_model_gets_its_prompt_and_a_trained_one_keeps_its_own(tmp_path: Path) -> None:
    assert prompt_for_model("smollm2-135m") == CHAT and prompt_for_model("local:Org/tiny-instruct") == CHAT
    assert prompt_for_model("gpt-4o-mini") == SOTOPIA and prompt_for_model("openai/some-model") == SOTOPIA
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    (old / MODEL_REF).write_text(json.dumps({"base": "smollm2-135m", "adapter": "adapter"}))  # before prompts
    write_model_ref(new, "smollm2-135m", "adapter", CHAT)
    assert model_prompt(old) == SOTOPIA and prompt_for_model(str(old)) == SOTOPIA
    assert model_prompt(new) == CHAT and prompt_for_model(str(new)) == CHAT
    assert model_prompt("smollm2-135m") is None
    (old / MODEL_REF).write_text(json.dumps({"base": "smollm2-135m", "prompt": "tiny"}))
    assert prompt_for_model(str(old)) == "tiny"  # the backends know no prompts; what uses one checks the name
    with pytest.raises(ValueError, match="unknown prompt 'tiny'"):
        LLMAgent(ScriptedBackend([]), prompt=prompt_for_model(str(old)))


def test_a_training_config_continues_a_policy_in_its_prompt(tmp_path: Path) -> None:
    from sotopia_env.training.sft import SFTTrainConfig as TrainConfig

    write_model_ref(tmp_path, "smollm2-135m", "adapter", SOTOPIA)
    assert TrainConfig().trained_prompt == CHAT
    continued = TrainConfig().starting_from(str(tmp_path))
    assert (continued.base_model, continued.trained_prompt) == ("smollm2-135m", SOTOPIA)
    assert TrainConfig(prompt=CHAT).starting_from(str(tmp_path)).trained_prompt == CHAT


def test_the_protocol_card_records_the_prompts(tmp_path: Path, two_friends) -> None:
    from sotopia_env.episodes.sotopia_protocol import get_protocol

    def episode(prompt: str, tag: str):
        agents = [LLMAgent(ScriptedBackend([say("hi")], cycle=True), prompt=prompt) for _ in range(2)]
        log = asyncio.run(play(two_friends, agents, RuleBasedEvaluator(), EnvConfig(max_turns=2), tag=tag, seed=0))
        return log

    chat, sotopia = episode(CHAT, "a"), episode(SOTOPIA, "b")
    assert chat.protocol is not None and chat.protocol.prompts == [prompt_record(CHAT)]
    (chat_card,), (sotopia_card,) = cards_of([chat]), cards_of([sotopia])
    assert chat_card.prompts == [prompt_record(CHAT)] and sotopia_card.prompts == [prompt_record(SOTOPIA)]
    assert chat_card.id != sotopia_card.id  # results under different prompts are never compared
    assert ("prompts", prompt_record(CHAT)) in chat_card.summary()
    assert prompt_record(CHAT).startswith("chat@") and prompt_record(CHAT) != prompt_record(SOTOPIA)
    assert get_protocol("sotopia-hard").prompt == SOTOPIA  # benchmark --protocol prompts every model so


@pytest.mark.model
def test_the_embedded_model_talks_about_its_scenario(embedded_model_path: str, library) -> None:
    """A few turns of ``run``'s default episode: no speech is meta-talk about answering, by the benchmark's own
    measure (SOTOPIA's prompt gave "I am not sure how to respond, but I will speak." here)."""
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.cli.run_cmd import CHAT_SETTINGS, DEFAULT_MODEL
    from sotopia_env.sampler import sample_setup

    setup = sample_setup(library, seed=0, scenario=SCENARIOS[0])
    agents = [load_agent(DEFAULT_MODEL, settings=GenerationSettings(seed=0, **CHAT_SETTINGS)) for _ in range(2)]
    assert {a.prompt for a in agents} == {CHAT}
    log = asyncio.run(play(setup, agents, None, EnvConfig(max_turns=4), seed=0))
    figures = talk_figures([log])
    transcript = [t.action.argument for t in log.turns]
    assert figures["speech turns"] >= 3, transcript
    assert figures["meta-talk"] == 0, transcript
    assert figures["on topic"] >= 0.5, transcript
