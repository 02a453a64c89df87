"""Persuasion that can be learnt (issue #44, part 4): the partner says its worry when asked, an answer in its own
words wins, the dense reward pays for asking and for answering, the stuffing guard still holds, and the
curriculum of generated train instances is disjoint from the held-out ones."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401

from sotopia_env.agents.rule_partners import RulePartner
from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import VerifiableJudge
from sotopia_env.generation.persuasion_curriculum import (
    CURRICULUM_TAG,
    FAVOURS,
    check_curriculum,
    curriculum_scenarios,
    favour_scenario,
    write_curriculum,
)
from sotopia_env.kinds.persuasion import (
    KIND,
    REVEALED_CREDIT,
    PersuasionFacts,
    asks_after_worry,
    hear,
    library_concerns,
)
from sotopia_env.rewards import episode_reward, partial_credit
from sotopia_env.sampler import sample_setup, sample_setups
from sotopia_env.training.experts import VerifiableExpert

ASK_WORRY = "Before I ask, is there anything that would worry you about it?"


def _persuasion_ids(library) -> list[str]:
    return sorted(s.id for s in library.select("verifiable") if s.verifiable.kind == "persuasion")


def _play(setup, learner, max_turns: int = 20):
    agents = [learner if not isinstance(learner, list) else ScriptedAgent(learner), RulePartner()]
    return asyncio.run(play(setup, agents, VerifiableJudge(), EnvConfig(max_turns=max_turns)))


def _said(log, seat: int) -> list[str]:
    return [t.action.argument for t in log.turns if t.agent == log.setup.agent_names[seat]]


def _won(log) -> bool:
    return bool(log.rating.ratings[log.setup.agent_names[0]].success)


def _every_concern_word_line() -> str:
    return "Could you do it? I will take care of " + ", ".join(sorted({w for c in library_concerns() for w in c}))


# -- the rules ---------------------------------------------------------------------------------------------------


def test_asked_the_partner_says_its_worry_and_an_answer_in_its_words_wins_every_instance(library):
    """All 24 shipped instances (8 train, 4 dev, 12 test): the worry question gets the scenario's ``worry``, and
    "don't worry about <those words>" with a question wins. The worry names its own concern and no other."""
    ids = _persuasion_ids(library)
    assert len(ids) == 24
    for sid in ids:
        setup = sample_setup(library, seed=0, scenario=sid)
        facts: PersuasionFacts = setup.scenario.verifiable
        assert facts.worry is not None, sid
        heard = hear(facts.worry, facts.concern)
        assert heard.addresses() and not heard.foreign, (sid, heard)
        log = _play(setup, [ASK_WORRY, f"Oh, don't worry about {facts.worry}. Would you help me?"])
        partner = _said(log, 1)
        assert partner[0].endswith(f"what worries me is {facts.worry}."), (sid, partner)
        assert _won(log), (sid, _said(log, 0), partner)


def test_only_a_worry_question_gets_the_worry_and_it_costs_a_round(library):
    setup = sample_setup(library, seed=0, scenario="verifiable-persuasion-car-ride")
    facts: PersuasionFacts = setup.scenario.verifiable
    assert asks_after_worry(ASK_WORRY) and asks_after_worry("What would put your mind at rest?")
    assert not asks_after_worry("Would you drive me home?")  # a question, no worry word
    assert not asks_after_worry("I hope that's no bother.")  # a worry word, no question
    log = _play(setup, ["Would you drive me home?", "Hmm, so I was hoping you would."])
    assert _said(log, 1)[:2] == facts.doubts  # no worry question: the cue lines, as before
    # a scenario without a worry: the question gets the next doubt, so the cue path is all there is
    bare = setup.model_copy(
        update={"scenario": setup.scenario.model_copy(update={"verifiable": facts.model_copy(update={"worry": None})})}
    )
    assert _said(_play(bare, [ASK_WORRY]), 1)[0] == facts.doubts[0]
    # each reveal is a round: asked as often as the partner has rounds, it leaves
    short = setup.model_copy(
        update={
            "scenario": setup.scenario.model_copy(update={"verifiable": facts.model_copy(update={"max_rounds": 2})})
        }
    )
    log = _play(short, [ASK_WORRY, ASK_WORRY, f"No {facts.worry}, promise. Could you?"])
    assert "worries me" in _said(log, 1)[0] and log.turns[-1].action.action_type.value == "leave"
    assert not _won(log)


def test_the_stuffing_guard_stays_asked_or_not(library):
    """One line listing every concern word of the library wins no instance, and asking after the worry first
    neither wins it nor earns partial credit: past ``MAX_FOREIGN`` the partner stopped listening."""
    stuffed = _every_concern_word_line()
    for sid in _persuasion_ids(library):
        setup = sample_setup(library, seed=0, scenario=sid)
        for lines in ([stuffed], [ASK_WORRY, stuffed]):
            log = _play(setup, lines)
            assert not _won(log), (sid, lines)
            assert episode_reward(log, 0, "goal", dense_reward=2.0).value == 0.0, (sid, lines)


def test_the_dense_reward_pays_for_asking_then_for_answering_and_success_dominates(library):
    setup = sample_setup(library, seed=0, scenario="verifiable-persuasion-car-ride")
    worry = setup.scenario.verifiable.worry
    cases = [
        (["Hello there, lovely day."], 0.0, False),  # nothing
        ([ASK_WORRY], REVEALED_CREDIT, False),  # asked after the worry and heard it
        ([ASK_WORRY, f"No {worry} for you to bear."], 1.0, False),  # answered, never asked for the favour
        ([ASK_WORRY, f"No {worry} for you to bear. Could you?"], 1.0, True),  # answered and asked: a win
    ]
    for lines, credit, won in cases:
        log = _play(setup, lines, max_turns=2 * len(lines))
        assert (partial_credit(log, 0), _won(log)) == (credit, won), lines
        reward = episode_reward(log, 0, "goal", dense_reward=2.0)
        assert reward.value == (10.0 + 2.0 if won else 2.0 * credit), lines
    assert 2.0 * 1.0 < 10.0  # a failure's whole dense part stays below any win


def test_a_worry_must_name_its_concern_in_a_phrase(tmp_path):
    from sotopia_env.library import LibraryError, load_library

    base = {"request": "lend you my lamp", "concern": ["bulb"], "doubts": ["It's old.", "It's fragile."]}
    assert PersuasionFacts(**base, worry="the bulb blowing").worry == "the bulb blowing"
    for worry, message in [
        ("the lamp falling over", "names no concern word"),
        ("the bulb blowing.", "without end punctuation"),
    ]:
        with pytest.raises(ValidationError, match=message):
            PersuasionFacts(**base, worry=worry)
    (tmp_path / "mine.yaml").write_text(
        "scenarios:\n  - id: my-lamp\n    codename: my_lamp\n    scenario: A neighbour asks to borrow a lamp.\n"
        "    goals: [Borrow the lamp., Lend the lamp.]\n    relationship: stranger\n"
        "    verifiable: {kind: persuasion, request: lend you my lamp, concern: [bulb], doubts: [a, b],"
        " worry: the cord}\n"
    )
    with pytest.raises(LibraryError, match=r"mine.yaml: scenarios entry 0 \(id 'my-lamp'\).*names no concern word"):
        load_library([tmp_path])


def test_the_expert_asks_then_answers_in_the_partners_words(library):
    """The BC demonstrator wins all 24 by asking: two moves, then thanks (from the cues alone, with the worry taken
    away: ``test_verifiable.test_every_persuasion_instance_is_won_by_listening``)."""
    for sid in _persuasion_ids(library):
        setup = sample_setup(library, seed=0, scenario=sid)
        log = _play(setup, VerifiableExpert(), max_turns=6)
        mine = _said(log, 0)
        assert _won(log) and mine[:2] == [KIND.OPENER, KIND.echo(setup.scenario.verifiable.worry)], (sid, mine)


# -- the curriculum ----------------------------------------------------------------------------------------------


def test_the_curriculum_is_disjoint_from_the_held_out_words_and_won_by_asking(library, tmp_path):
    from sotopia_env.library import load_library

    scenarios = curriculum_scenarios()
    assert len(scenarios) == len(FAVOURS) >= 40 and len({s.id for s in scenarios}) == len(scenarios)
    held_out = {
        w.lower()
        for s in library.scenarios.values()
        if isinstance(s.verifiable, PersuasionFacts) and s.split in ("dev", "test")
        for w in s.verifiable.concern
    }
    for s in scenarios:
        assert s.split == "train" and CURRICULUM_TAG in s.tags
        for word in s.verifiable.concern:  # no word of a generated concern begins or is begun by a held-out one
            assert not any(word.startswith(h) or h.startswith(word) for h in held_out), (s.id, word)
    assert [s.id for s in curriculum_scenarios(5, seed=3)] == [s.id for s in curriculum_scenarios(5, seed=3)]
    assert [s.id for s in curriculum_scenarios(5, seed=3)] != [s.id for s in curriculum_scenarios(5, seed=4)]

    write_curriculum(tmp_path, seed=0)
    extended = load_library([tmp_path])
    assert len(extended.select("verifiable:persuasion:train")) == 8 + len(FAVOURS)
    assert len(extended.select("verifiable:persuasion:test")) == 12 and len(library_concerns()) == 24  # not shipped
    setups = sample_setups(sorted(extended.select(CURRICULUM_TAG), key=lambda s: s.id), extended, 1, seed=0)
    for setup in setups:
        assert _won(_play(setup, VerifiableExpert(), max_turns=6)), setup.scenario.id

    petrol = FAVOURS[0].__class__(**{**FAVOURS[0].__dict__, "concern": ("soak", "petrol"), "worry": "soak"})
    with pytest.raises(ValueError, match="'petrol' overlaps 'petrol' of verifiable-persuasion-car-ride"):
        check_curriculum([favour_scenario(petrol, ("Hmm.", "Well."))], library)


def test_the_echo_is_a_copy_of_prompt_tokens_for_the_embedded_model(tmp_path):
    """What BC on the curriculum teaches is a copy: in the expert's answer, the worry's tokens are a run of tokens
    of the prompt the model is shown (the embedded model's real tokenizer and chat template)."""
    from transformers import AutoTokenizer

    from sotopia_env.embedded_models import resolve_model_path
    from sotopia_env.library import load_library
    from sotopia_env.prompt import prompt_text
    from sotopia_env.training.dataset import build_dataset

    write_curriculum(tmp_path, count=6, seed=0)
    extended = load_library([tmp_path])
    setups = sample_setups(sorted(extended.select(CURRICULUM_TAG), key=lambda s: s.id), extended, 1, seed=0)
    logs = [_play(setup, VerifiableExpert(), max_turns=6) for setup in setups]
    worries = {log.setup.scenario.verifiable.worry for log in logs}
    dataset, _ = build_dataset(logs, [lambda samples: [s for s in samples if s.seat == 0]])
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m"))
    copied = set()
    for row in dataset:
        completion = "".join(m["content"] for m in row["completion"])
        (worry,) = [w for w in worries if w in completion] or [None]
        if worry is None:
            continue  # the opener and the thanks
        prompt = tokenizer(prompt_text(row["prompt"], tokenizer), add_special_tokens=False)["input_ids"]
        run = tokenizer(" " + worry, add_special_tokens=False)["input_ids"]
        assert any(prompt[i : i + len(run)] == run for i in range(len(prompt))), worry
        copied.add(worry)
    assert copied == worries


def test_curriculum_rollouts_with_the_dense_reward_on_a_real_model(tmp_path, tmp_path_factory):
    """Episode GRPO's rollouts (``make_rollout`` with ``scenarios_dir``, ``play_many``) on curriculum starts, a tiny
    random model in seat 1: every episode rated, its reward the win's 10 + dense part or the dense part times the
    kind's partial credit of its transcript."""
    from sotopia_env.backends.local import LocalBackend
    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig, make_rollout
    from sotopia_env.training.episode_rollouts import play_many

    write_curriculum(tmp_path, count=3, seed=0)
    spec = tiny_model_spec(tmp_path_factory)
    config = EpisodeGRPOConfig(
        base_model=spec, scenarios=CURRICULUM_TAG, scenarios_dir=[str(tmp_path)], max_turns=4,
        max_completion_length=12, dense_reward=2.0, seed=0,
    )  # fmt: skip
    rollout = make_rollout(config, spec)
    assert len(rollout.setups) == 3 and all(CURRICULUM_TAG in s.scenario.tags for s in rollout.setups)
    backend = LocalBackend.from_spec(spec)
    try:
        episodes = asyncio.run(play_many(rollout, backend, [(s, seed) for s in rollout.setups for seed in (1, 2)]))
    finally:
        backend.close()
    assert len(episodes) == 6
    for episode in episodes:
        assert episode.log is not None and episode.reward.value is not None
        expected = 12.0 if episode.reward.success else 2.0 * partial_credit(episode.log, 0)
        assert episode.reward.value == expected
