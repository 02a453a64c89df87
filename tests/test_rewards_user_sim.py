"""User simulation: strict item-selection reward and model-vs-human response distributions."""

from __future__ import annotations

from typing import Any

import pytest

from sotopia_env.training.rewards import (
    ResponseRecord,
    item_selection_reward,
    parse_item_choice,
    response_distribution,
)

CANDIDATES = [f"Item number {i} (colour {c})" for i, c in enumerate("abcdefghijklmnopqrst", start=1)]
ANSWER = 2  # 0-based: "C", "(C)", "3"
TEXT = CANDIDATES[ANSWER]


def reward(output: Any, candidates: list[str] = CANDIDATES, answer: int = ANSWER) -> float:
    return item_selection_reward([""], [output], candidates=[candidates], answer_index=[answer])[0]


@pytest.mark.parametrize(
    "output",
    [
        TEXT,
        "C",
        "(C)",
        "3",
        f"  {TEXT}  \n",
        "C<|im_end|>",
        "3 <|eot_id|>\n",
        "(C)</s></s>",
        "<|im_start|>assistant\nC",
        "<|start_header_id|>assistant<|end_header_id|>\n\n3<|eot_id|>",
        "Assistant: C",
    ],
)
def test_right_answer_in_each_strict_form(output: str) -> None:
    assert reward(output) == 1.0


def test_conversational_completion() -> None:
    assert reward([{"role": "assistant", "content": "(C)"}]) == 1.0


@pytest.mark.parametrize(
    "output",
    [
        "c",  # lower-case letter
        "(c)",
        "C.",
        "C)",
        "(C",
        "[C]",
        "Option C",
        "Answer: C",
        "C, item 3",
        "03",  # leading zero
        "3.",
        "#3",
        "three",
        "B",  # another candidate's label
        "2",
        CANDIDATES[1],  # another candidate's text
        TEXT.lower(),  # case-sensitive
        TEXT[:-1],  # partial text
        "Item number 3",
        f"{TEXT} because it fits",  # extra words
        f'"{TEXT}"',
        f"C {TEXT}",
        "",
        "   ",
        "<|im_end|>",
        "C<eos>",  # unknown end token
    ],
)
def test_near_misses_score_zero(output: str) -> None:
    assert reward(output) == 0.0


@pytest.mark.parametrize("output", ["U", "(Z)", "21", "0", "100"])
def test_labels_and_numbers_out_of_range_score_zero(output: str) -> None:
    assert parse_item_choice(output, CANDIDATES) is None


def test_last_candidate_by_letter_and_number() -> None:
    assert parse_item_choice("T", CANDIDATES) == 19
    assert parse_item_choice("20", CANDIDATES) == 19


def test_ambiguous_output_names_nothing() -> None:
    clashing = ["12", *CANDIDATES[1:]]  # "12" is candidate 0's text and candidate 11's number
    assert parse_item_choice("12", clashing) is None
    looks_like_label = [CANDIDATES[0], "A", *CANDIDATES[2:]]  # "A" is candidate 1's text and 0's label
    assert parse_item_choice("A", looks_like_label) is None
    repeated = [TEXT, *CANDIDATES[1:]]
    assert parse_item_choice(TEXT, repeated) is None


def test_candidate_own_whitespace_ignored() -> None:
    padded = [*CANDIDATES[:ANSWER], f" {TEXT} ", *CANDIDATES[ANSWER + 1 :]]
    assert reward(TEXT, padded) == 1.0


def test_batch_and_trl_columns() -> None:
    rewards = item_selection_reward(
        ["p"] * 3,
        ["C", "A", "1"],
        candidates=[CANDIDATES] * 3,
        answer_index=[2, 2, 0],
        trainer_state=None,
        completion_ids=[[0]] * 3,
    )
    assert rewards == [1.0, 0.0, 1.0]


@pytest.mark.parametrize("answer", [-1, 20])
def test_answer_index_out_of_range_raises(answer: int) -> None:
    with pytest.raises(ValueError, match="answer_index"):
        reward("C", answer=answer)


@pytest.mark.parametrize("count", [0, 27])
def test_candidate_count_limits(count: int) -> None:
    with pytest.raises(ValueError, match="candidates"):
        parse_item_choice("A", [f"item {i}" for i in range(count)])


def test_columns_must_align() -> None:
    with pytest.raises(ValueError, match="column 'answer_index'"):
        item_selection_reward([""], ["C"], candidates=[CANDIDATES], answer_index=[2, 3])


# --- response distribution --------------------------------------------------------------------


def rec(condition: str, item: str, source: str, answer: float) -> dict[str, Any]:
    return {"condition": condition, "item_id": item, "source": source, "answer": answer}


RECORDS = [
    # control, q1: humans 1, 2, 2 (mode 2); model 2, 1 -> accuracy 0.5
    rec("control", "q1", "human", 1),
    rec("control", "q1", "human", 2),
    rec("control", "q1", "human", 2),
    rec("control", "q1", "model", 2),
    rec("control", "q1", "model", 1),
    # control, q2: humans 4, 5 (tied modes); model 5 -> accuracy 1
    rec("control", "q2", "human", 4),
    rec("control", "q2", "human", 5),
    rec("control", "q2", "model", 5),
    # control, q3: humans only -> unmatched
    rec("control", "q3", "human", 3),
    # treatment: model only
    rec("treatment", "q1", "model", 4),
]


def test_response_distribution_per_condition() -> None:
    report = response_distribution(RECORDS)
    assert list(report) == ["control", "treatment"]
    control = report["control"]
    assert (control.n_model, control.n_human) == (3, 6)
    # CDFs of {1,2,5} and {1,2,2,3,4,5} differ by 1/6 on [1,3) and [4,5), agree on [3,4)
    assert control.wasserstein == pytest.approx(0.5)
    assert [(i.item_id, i.human_modes, i.accuracy) for i in control.items] == [
        ("q1", (2.0,), 0.5),
        ("q2", (4.0, 5.0), 1.0),
    ]
    assert control.accuracy == 0.75
    assert control.unmatched_items == ("q3",)


def test_condition_without_humans() -> None:
    treatment = response_distribution(RECORDS)["treatment"]
    assert treatment.wasserstein is None and treatment.accuracy is None
    assert treatment.items == () and treatment.unmatched_items == ("q1",)


def test_identical_distributions_have_zero_distance() -> None:
    records = [rec("c", "q", source, a) for source in ("model", "human") for a in (1, 3, 3)]
    report = response_distribution(records)["c"]
    assert report.wasserstein == 0.0 and report.accuracy == pytest.approx(2 / 3)


def test_accepts_record_objects_and_empty_input() -> None:
    record = ResponseRecord(condition="c", item_id="q", source="model", answer=1)
    assert response_distribution([record])["c"].n_model == 1
    assert response_distribution([]) == {}


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (rec("c", "q", "bot", 1), "record 1: field 'source'"),
        (rec("c", "q", "human", "high"), "record 1: field 'answer'"),
        ({"condition": "c", "source": "human", "answer": 1}, "record 1: field 'item_id': Field required"),
    ],
)
def test_bad_records_raise(record: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        response_distribution([rec("c", "q", "human", 1), record])
