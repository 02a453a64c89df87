"""Social-R1 composite reward: length factor, composition, judge policies and the SIP judges."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import pytest

from sotopia_env.training.rewards import (
    STAGES,
    JudgeError,
    LLMSIPJudge,
    RuleBasedSIPJudge,
    SocialR1Config,
    StageJudgement,
    length_factor,
    make_social_r1_reward,
    social_r1_scores,
)
from sotopia_env.training.rewards.sip_judges import JUDGE_SCHEMA, parse_judgement

PROMPT = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Robin gave Sam a hug."}]


def completion(letter: str = "B", words: int = 100) -> str:
    reasoning = " ".join(["word"] * words)
    return f"<think>{reasoning}</think><answer>({letter}) text</answer>"


class FixedJudge:
    """Returns one judgement (or raises one error) and records every call."""

    def __init__(self, result: StageJudgement | JudgeError) -> None:
        self.result = result
        self.calls: list[tuple[str, str]] = []

    def judge(self, context: str, reasoning: str) -> StageJudgement:
        self.calls.append((context, reasoning))
        if isinstance(self.result, JudgeError):
            raise self.result
        return self.result


class BatchJudge(FixedJudge):
    def __init__(self, results: list[StageJudgement | JudgeError]) -> None:
        super().__init__(StageJudgement(0.0))
        self.results = results
        self.batches: list[Sequence[tuple[str, str]]] = []

    def judge_batch(self, pairs: Sequence[tuple[str, str]]) -> list[StageJudgement | JudgeError]:
        self.batches.append(pairs)
        return self.results


FULL = StageJudgement(1.0, dict.fromkeys(STAGES, 0.8))


# --- length factor ----------------------------------------------------------------------------

CFG = SocialR1Config(min_tokens=20, max_tokens=100, short_scale=10.0, long_scale=50.0)


@pytest.mark.parametrize("n", [20, 21, 60, 99, 100])
def test_length_factor_is_one_inside_budget(n: int) -> None:
    assert length_factor(n, CFG) == 1.0


def test_length_factor_continuous_at_edges() -> None:
    assert length_factor(19, CFG) == pytest.approx(1.0, abs=0.011)
    assert length_factor(101, CFG) == pytest.approx(1.0, abs=0.001)
    assert 1.0 - length_factor(19, CFG) < 1.0 - length_factor(18, CFG)


def test_length_factor_decays_monotonically_outside() -> None:
    below = [length_factor(n, CFG) for n in range(20, -1, -1)]
    above = [length_factor(n, CFG) for n in range(100, 400)]
    for values in (below, above):
        assert all(later < earlier for earlier, later in pairwise(values))
        assert all(0.0 < v <= 1.0 for v in values)


def test_length_factor_scale() -> None:
    assert length_factor(10, CFG) == pytest.approx(math.exp(-1))
    assert length_factor(150, CFG) == pytest.approx(math.exp(-1))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_tokens": 10, "max_tokens": 5},
        {"min_tokens": -1},
        {"short_scale": 0.0},
        {"long_scale": -1.0},
        {"on_judge_error": "ignore"},
    ],
)
def test_config_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SocialR1Config(**kwargs)


# --- composition ------------------------------------------------------------------------------


def total(text: str, label: object = "2", config: SocialR1Config | None = None, judge: Any = None) -> float:
    reward = make_social_r1_reward(config or SocialR1Config(), judge or FixedJudge(FULL))
    return reward([PROMPT], [text], label=[label])[0]


def test_correct_answer_full_process() -> None:
    expected = 1.0 + 0.5 * (0.5 * 1.0 + 0.5 * 0.8) * 1.0
    assert total(completion("B")) == pytest.approx(expected)


def test_wrong_answer_keeps_process_term() -> None:
    assert total(completion("A")) == pytest.approx(0.5 * (0.5 + 0.4))


def test_missing_answer_counts_as_wrong() -> None:
    text = f"<think>{' '.join(['word'] * 50)}</think><answer>no idea</answer>"
    assert total(text) == pytest.approx(0.45)


@pytest.mark.parametrize("text", ["no tags", completion("B") + " extra", "Sure " + completion("B")])
def test_invalid_format_scores_zero_without_judging(text: str) -> None:
    judge = FixedJudge(FULL)
    [score] = social_r1_scores([PROMPT], [text], ["2"], SocialR1Config(), judge)
    assert score.total == 0.0 and not score.format_ok and score.length is None
    assert judge.calls == []


def test_outcome_reported_even_when_format_invalid() -> None:
    [score] = social_r1_scores([PROMPT], [completion("B") + " extra"], ["2"], judge=FixedJudge(FULL))
    assert score.outcome == 1.0 and score.total == 0.0


def test_weights_and_tau_configurable() -> None:
    config = SocialR1Config(w_outcome=2.0, w_struct=1.0, w_content=3.0, tau=0.1)
    assert total(completion("B"), config=config) == pytest.approx(2.0 + 0.1 * (1.0 + 3.0 * 0.8))


def test_length_scales_process_term_only() -> None:
    config = SocialR1Config(min_tokens=0, max_tokens=50, long_scale=50.0)
    [score] = social_r1_scores([PROMPT], [completion("B", words=100)], ["2"], config, FixedJudge(FULL))
    assert score.length == pytest.approx(math.exp(-1))
    assert score.total == pytest.approx(1.0 + 0.5 * 0.9 * math.exp(-1))


def test_custom_token_counter() -> None:
    config = SocialR1Config(min_tokens=0, max_tokens=10, long_scale=10.0, count_tokens=len)
    [score] = social_r1_scores([PROMPT], [completion("B", words=4)], ["2"], config, FixedJudge(FULL))
    assert score.length == pytest.approx(math.exp(-(((19 - 10) / 10) ** 2)))  # "word word word word"


def test_judge_sees_prompt_user_text_and_reasoning() -> None:
    judge = FixedJudge(FULL)
    text = "<|im_start|>assistant\n<think> I notice a hug. </think><answer>B</answer><|im_end|>"
    assert total(text, config=SocialR1Config(min_tokens=0), judge=judge) == pytest.approx(1.45)
    assert judge.calls == [("Robin gave Sam a hug.", "I notice a hug.")]
    make_social_r1_reward(judge=judge)(["plain prompt"], [completion()], label=["2"])
    assert judge.calls[-1][0] == "plain prompt"


def test_batch_judge_gets_one_call_with_valid_completions_only() -> None:
    judge = BatchJudge([FULL, StageJudgement(0.0)])
    texts = [completion("B"), "bad", completion("A")]
    rewards = make_social_r1_reward(judge=judge)([PROMPT] * 3, texts, label=["2"] * 3)
    assert rewards == pytest.approx([1.45, 0.0, 0.0])
    assert len(judge.batches) == 1 and len(judge.batches[0]) == 2
    assert judge.calls == []


def test_judge_returning_wrong_count_raises() -> None:
    with pytest.raises(JudgeError, match="2 judgements for 1"):
        total(completion(), judge=BatchJudge([FULL, FULL]))


def test_labels_must_align() -> None:
    with pytest.raises(ValueError, match="column 'label'"):
        make_social_r1_reward()([PROMPT, PROMPT], [completion(), completion()], label=["2"])


def test_default_judge_is_rule_based() -> None:
    reward = make_social_r1_reward()
    assert reward.__name__ == "social_r1_reward"
    assert reward([PROMPT], [completion("B", words=40)], label=["2"], trainer_state=None) == [1.0]


# --- judge failure policy ---------------------------------------------------------------------


def test_judge_error_raises_by_default() -> None:
    with pytest.raises(JudgeError, match="down"):
        total(completion(), judge=FixedJudge(JudgeError("down")))


@pytest.mark.parametrize("judge", [FixedJudge(JudgeError("down")), BatchJudge([JudgeError("down")])])
def test_judge_error_outcome_only(judge: Any, caplog: pytest.LogCaptureFixture) -> None:
    config = SocialR1Config(on_judge_error="outcome_only", w_outcome=1.5)
    with caplog.at_level(logging.WARNING):
        [score] = social_r1_scores([PROMPT], [completion("B")], ["2"], config, judge)
    assert score.total == 1.5 and score.judge_error == "down"
    assert score.struct is None and score.content is None and score.length == 1.0
    assert "SIP judge failed" in caplog.text


# --- StageJudgement ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("order", "scores"),
    [
        (1.5, {}),
        (-0.1, {}),
        (float("nan"), {}),
        (True, {}),
        ("1", {}),
        (1.0, {"encoding": 2.0}),
        (1.0, {"planning": 0.5}),
    ],
)
def test_stage_judgement_rejects_bad_scores(order: Any, scores: dict[str, Any]) -> None:
    with pytest.raises(JudgeError):
        StageJudgement(order, scores)


def test_stage_judgement_content_is_mean_over_four_stages() -> None:
    assert StageJudgement(1, {"encoding": 1.0, "interpretation": 0.6}).content == pytest.approx(0.4)


# --- rule-based judge -------------------------------------------------------------------------

SECTIONS = {
    "encoding": "Encoding: I notice that Robin hugged Sam after the long trip home today.",
    "interpretation": "Interpretation: this implies that Robin missed Sam a lot and feels relieved.",
    "goal_clarification": "Goals: Sam wants to make Robin feel welcome and cared for at home.",
    "response_generation": "Response: the best answer is to hug back warmly and say thank you.",
}


def rule(*stages: str) -> StageJudgement:
    return RuleBasedSIPJudge().judge("", " ".join(SECTIONS[s] for s in stages))


def test_rule_judge_all_stages_in_order() -> None:
    judgement = rule(*STAGES)
    assert judgement.stages_in_order == 1.0
    assert judgement.stage_scores == dict.fromkeys(STAGES, 1.0)


def test_rule_judge_reversed_order() -> None:
    judgement = rule(*reversed(STAGES))
    assert judgement.stages_in_order == 0.25
    assert set(judgement.stage_scores.values()) == {1.0}


def test_rule_judge_partial_order() -> None:
    assert rule("interpretation", "encoding", "goal_clarification").stages_in_order == 0.5


def test_rule_judge_missing_stages_score_zero() -> None:
    judgement = rule("encoding", "response_generation")
    assert judgement.stages_in_order == 0.5
    assert judgement.stage_scores["interpretation"] == 0.0 and judgement.stage_scores["encoding"] == 1.0


def test_rule_judge_nothing_found() -> None:
    judgement = RuleBasedSIPJudge().judge("", "Robin is nice, so (B).")
    assert judgement.stages_in_order == 0.0 and judgement.content == 0.0


def test_rule_judge_short_sections_get_partial_content() -> None:
    judgement = RuleBasedSIPJudge(min_section_words=8).judge("", "Encoding: a hug. Goals: comfort her.")
    assert judgement.stage_scores["encoding"] == pytest.approx(3 / 8)
    assert judgement.stage_scores["goal_clarification"] == pytest.approx(3 / 8)
    assert judgement.stages_in_order == 0.5


def test_rule_judge_custom_markers() -> None:
    judge = RuleBasedSIPJudge(markers={"encoding": [r"\bcues:"], "interpretation": [r"\bmeaning:"]})
    judgement = judge.judge("", "Meaning: x. Cues: y.")
    assert judgement.stages_in_order == 0.25 and judgement.stage_scores["goal_clarification"] == 0.0


# --- LLM judge --------------------------------------------------------------------------------

GOOD_REPLY = json.dumps({"stages_in_order": 1, "stage_scores": dict.fromkeys(STAGES, 0.5)})


class FakeBackend:
    """Has the project's ``async generate(requests) -> completions``; replies in order."""

    model = "fake"

    def __init__(self, replies: list[tuple[str, str | None]]) -> None:
        self.replies = replies
        self.calls: list[list[Any]] = []

    async def generate(self, requests: list[Any]) -> list[Any]:
        self.calls.append(requests)
        return [SimpleNamespace(text=text, error=error) for text, error in self.replies]


def test_llm_judge_parses_json_and_builds_request() -> None:
    backend = FakeBackend([(GOOD_REPLY, None)])
    judgement = LLMSIPJudge(backend, seed=7).judge("Robin gave Sam a hug.", "I notice a hug.")
    assert judgement == StageJudgement(1, dict.fromkeys(STAGES, 0.5))
    [[request]] = backend.calls
    assert request.json_schema == JUDGE_SCHEMA and request.temperature == 0.0 and request.seed == 7
    assert [m["role"] for m in request.messages] == ["system", "user"]
    assert "Robin gave Sam a hug." in request.messages[1]["content"]
    assert "I notice a hug." in request.messages[1]["content"]


def test_llm_judge_repairs_wrapped_json() -> None:
    backend = FakeBackend([(f"Here you go:\n```json\n{GOOD_REPLY}\n```", None)])
    assert LLMSIPJudge(backend).judge("c", "r").stages_in_order == 1


@pytest.mark.parametrize(
    ("reply", "error", "message"),
    [
        ("", "rate limited", "judge backend error: rate limited"),
        ("I cannot grade this.", None, "lacks 'stages_in_order'"),
        (json.dumps({"stages_in_order": 1}), None, "lacks 'stages_in_order' or 'stage_scores'"),
        (json.dumps({"stages_in_order": 1, "stage_scores": {"encoding": 1}}), None, "lacks stage score"),
        (json.dumps({"stages_in_order": 3, "stage_scores": dict.fromkeys(STAGES, 1)}), None, "in \\[0, 1\\]"),
    ],
)
def test_llm_judge_failures_raise(reply: str, error: str | None, message: str) -> None:
    with pytest.raises(JudgeError, match=message):
        LLMSIPJudge(FakeBackend([(reply, error)])).judge("c", "r")


def test_llm_judge_batch_returns_errors_in_place() -> None:
    backend = FakeBackend([(GOOD_REPLY, None), ("", "timeout")])
    results = LLMSIPJudge(backend).judge_batch([("c1", "r1"), ("c2", "r2")])
    assert isinstance(results[0], StageJudgement) and isinstance(results[1], JudgeError)
    assert len(backend.calls) == 1


class RaisingBackend:
    model = "down"

    async def generate(self, requests: list[Any]) -> list[Any]:
        raise ConnectionError("no route to judge")


def test_llm_judge_backend_exception_fails_each_judgement() -> None:
    results = LLMSIPJudge(RaisingBackend()).judge_batch([("c1", "r1"), ("c2", "r2")])
    assert [str(r) for r in results] == ["judge backend failed: ConnectionError('no route to judge')"] * 2
    config = SocialR1Config(on_judge_error="outcome_only")
    reward = make_social_r1_reward(config, LLMSIPJudge(RaisingBackend()))
    assert reward([PROMPT] * 2, [completion("B"), completion("A")], label=["2"] * 2) == [1.0, 0.0]
    with pytest.raises(JudgeError, match="no route"):
        make_social_r1_reward(judge=LLMSIPJudge(RaisingBackend()))([PROMPT], [completion()], label=["2"])


def test_llm_judge_batch_count_mismatch_and_empty() -> None:
    with pytest.raises(JudgeError, match="1 completions for 2 requests"):
        LLMSIPJudge(FakeBackend([(GOOD_REPLY, None)])).judge_batch([("c", "r"), ("c", "r")])
    backend = FakeBackend([])
    assert LLMSIPJudge(backend).judge_batch([]) == []
    assert backend.calls == []


def test_llm_judge_in_reward_uses_one_backend_call() -> None:
    backend = FakeBackend([(GOOD_REPLY, None), (GOOD_REPLY, None)])
    reward = make_social_r1_reward(SocialR1Config(), LLMSIPJudge(backend))
    rewards = reward([PROMPT] * 3, [completion("B"), "bad", completion("C")], label=["2"] * 3)
    assert rewards == pytest.approx([1.0 + 0.5 * 0.75, 0.0, 0.5 * 0.75])
    assert len(backend.calls) == 1 and len(backend.calls[0]) == 2


def test_parse_judgement_ignores_extra_top_level_keys() -> None:
    reply = json.dumps({"stages_in_order": 0.5, "stage_scores": dict.fromkeys(STAGES, 0), "why": "short"})
    assert parse_judgement(reply).stages_in_order == 0.5
