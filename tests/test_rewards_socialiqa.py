"""Social IQa: loader, prompt, think/answer format, answer parser, rewards and evaluation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sotopia_env.training.rewards import (
    FormatConfig,
    SocialIQaItem,
    SocialIQaRewardConfig,
    build_prompt,
    check_format,
    evaluate_socialiqa,
    load_socialiqa,
    make_socialiqa_rewards,
    parse_choice,
    socialiqa_answer_reward,
    socialiqa_format_reward,
    socialiqa_reward,
    wilson_interval,
)

SHARED = Path(os.environ.get("SOTOPIA_SHARED", Path(__file__).resolve().parents[2] / "shared"))
SAMPLE = SHARED / "data" / "social_iqa" / "sample.jsonl"

GOOD = "<think>Robin is hungry.</think><answer>(B) So Robin can eat</answer>"
ROW = {
    "context": "Alex walked Robin towards the execution chamber for her last meal.",
    "question": "Why did Alex do this?",
    "answerA": "work at the jail",
    "answerB": "So Robin can eat",
    "answerC": "release her",
    "label": "1",
}


def fmt(completion: object, **config: object) -> str | None:
    return check_format(completion, FormatConfig(**config)).error  # type: ignore[arg-type]


# --- format -----------------------------------------------------------------------------------


def test_valid_format_returns_reasoning_and_answer() -> None:
    check = check_format(GOOD)
    assert check.valid and check.error is None
    assert check.reasoning == "Robin is hungry."
    assert check.answer == "(B) So Robin can eat"


@pytest.mark.parametrize(
    "text",
    [
        GOOD,
        "\n  " + GOOD + "\n",
        "<think>\nline one\nline two\n</think>\n\n<answer>\n(B)\n</answer>",
        "<think></think><answer></answer>",  # empty parts are answer problems, not format problems
    ],
)
def test_valid_formats(text: str) -> None:
    assert fmt(text) is None


@pytest.mark.parametrize("tag", ["<think>", "</think>", "<answer>", "</answer>"])
def test_missing_tag(tag: str) -> None:
    assert fmt(GOOD.replace(tag, "")) == f"missing {tag}"


@pytest.mark.parametrize("tag", ["<think>", "</think>", "<answer>", "</answer>"])
def test_duplicate_tag(tag: str) -> None:
    assert fmt(GOOD.replace(tag, tag + tag, 1)) == f"duplicate {tag}"


@pytest.mark.parametrize(
    "text",
    [
        "<answer>(B)</answer><think>x</think>",
        "</think>x<think><answer>(B)</answer>",
        "<think>x<answer></think>(B)</answer>",
        "<think>x</think></answer>(B)<answer>",
    ],
)
def test_wrong_order(text: str) -> None:
    assert fmt(text) == "tags out of order"


def test_text_before_think() -> None:
    assert fmt("Sure! " + GOOD) == "text before <think>"


def test_text_between_think_and_answer() -> None:
    assert fmt("<think>x</think> So: <answer>(B)</answer>") == "text between </think> and <answer>"


@pytest.mark.parametrize("tail", [" thanks", "<|im_end|> more", "<eos>", "\n(B)"])
def test_text_after_answer(tail: str) -> None:
    assert fmt(GOOD + tail) == "text after </answer>"


@pytest.mark.parametrize(
    "tail",
    ["<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", " \n<|im_end|>\n", "<|im_end|><|endoftext|>"],
)
def test_eos_after_answer_allowed(tail: str) -> None:
    assert fmt(GOOD + tail) is None


def test_eos_tokens_configurable() -> None:
    assert fmt(GOOD + "<eos>", eos_tokens=("<eos>",)) is None
    assert fmt(GOOD + "<|im_end|>", eos_tokens=("<eos>",)) == "text after </answer>"


@pytest.mark.parametrize(
    "header",
    [
        "<|im_start|>assistant\n",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "Assistant:",
        "Assistant: ",
    ],
)
def test_chat_headers_stripped(header: str) -> None:
    assert fmt(header + GOOD + "<|eot_id|>") is None


def test_header_stripped_only_at_start() -> None:
    assert fmt("<|im_start|>assistant\n<|im_start|>assistant\n" + GOOD) == "text before <think>"
    assert fmt("Assistant:" + GOOD, assistant_headers=()) == "text before <think>"


def test_conversational_completion() -> None:
    assert fmt([{"role": "assistant", "content": GOOD}]) is None
    assert fmt([{"role": "assistant", "content": "no tags"}]) == "missing <think>"


def test_completion_of_wrong_type_raises() -> None:
    with pytest.raises(TypeError):
        check_format([GOOD])  # type: ignore[list-item]


def test_think_prefilled_by_template() -> None:
    without_open = "Robin is hungry.</think><answer>(B)</answer>"
    assert fmt(without_open) == "missing <think>"
    assert fmt(without_open, think_prefilled=True) is None
    assert fmt(GOOD, think_prefilled=True) is None


# --- answer parser ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("(A) work at the jail", "A"),
        ("(B)", "B"),
        ("The answer is (C).", "C"),
        ("(A) work at the jail (A)", "A"),
        ("C", "C"),
        ("C.", "C"),
        (" B ", "B"),
        ("(a) work at the jail", None),
        ("c", None),
        ("(D) other", None),
        ("D", None),
        ("(A) or (B)", None),
        ("A or B", None),
        ("work at the jail", None),
        ("Option A", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_choice(block: str | None, expected: str | None) -> None:
    assert parse_choice(block) == expected


def test_parse_choice_other_letters() -> None:
    assert parse_choice("(E)", "ABCDE") == "E"


# --- rewards ----------------------------------------------------------------------------------


def answer(text: str, label: object = "2") -> float:
    return socialiqa_answer_reward([""], [text], label=[label])[0]


def test_format_reward_values() -> None:
    assert socialiqa_format_reward([""] * 2, [GOOD, "no tags"]) == [1.0, -1.0]


@pytest.mark.parametrize("label", ["2", 2, "B"])
def test_answer_correct(label: object) -> None:
    assert answer(GOOD, label) == 2.0


def test_answer_wrong() -> None:
    assert answer(GOOD, "1") == -2.0


@pytest.mark.parametrize(
    "text",
    [
        "<think>x</think>",  # no answer block
        "<think>x</think><answer>(B) So Robin can eat",  # unclosed block
        "<think>x</think><answer></answer>",  # empty block
        "<think>x</think><answer>So Robin can eat</answer>",  # text without a letter
        "<think>x</think><answer>(A) or (B)</answer>",  # ambiguous
        "<think>x</think><answer>(b)</answer>",  # lower case
    ],
)
def test_answer_missing_or_invalid(text: str) -> None:
    assert answer(text) == -3.0


def test_answer_read_despite_bad_format() -> None:
    text = "Sure! " + GOOD + " Hope that helps."
    assert socialiqa_format_reward([""], [text]) == [-1.0]
    assert answer(text) == 2.0


def test_answer_uses_last_complete_block() -> None:
    assert answer("<answer>(A)</answer><answer>(B)</answer>") == 2.0
    assert answer("<answer>(B)</answer><answer>(A)") == 2.0


def test_answer_with_headers_and_conversational_form() -> None:
    assert answer("<|im_start|>assistant\n" + GOOD + "<|im_end|>") == 2.0
    assert socialiqa_answer_reward([[]], [[{"role": "assistant", "content": GOOD}]], label=["2"]) == [2.0]


@pytest.mark.parametrize("label", ["0", "4", 0, 4, "D", "b", True, None, 2.0, "12"])
def test_invalid_label_raises(label: object) -> None:
    with pytest.raises(ValueError, match="invalid answer label"):
        answer(GOOD, label)


def test_total_reward_is_sum_and_ignores_trl_columns() -> None:
    completions = [GOOD, GOOD + " extra", "<think>x</think><answer>(A)</answer>", "nothing"]
    rewards = socialiqa_reward(
        [""] * 4, completions, label=["2"] * 4, trainer_state=None, completion_ids=[[1]] * 4, log_metric=print
    )
    assert rewards == [3.0, 1.0, -1.0, -4.0]


def test_label_column_must_align() -> None:
    with pytest.raises(ValueError, match="column 'label' has 1 entries for 2 completions"):
        socialiqa_answer_reward(["", ""], [GOOD, GOOD], label=["2"])


def test_reward_values_configurable() -> None:
    config = SocialIQaRewardConfig(
        format_valid=0.5, format_invalid=0.0, answer_correct=1.0, answer_wrong=0.0, answer_missing=-1.0
    )
    rewards = make_socialiqa_rewards(config)
    assert rewards.format([""], ["bad"]) == [0.0]
    assert rewards.answer([""] * 3, [GOOD, GOOD, "bad"], label=["2", "3", "2"]) == [1.0, 0.0, -1.0]
    assert rewards.total([""], [GOOD], label=["2"]) == [1.5]
    assert [f.__name__ for f in rewards] == [
        "socialiqa_format_reward",
        "socialiqa_answer_reward",
        "socialiqa_reward",
    ]


# --- loading and prompting --------------------------------------------------------------------


def write_jsonl(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_skips_blank_lines_and_ignores_extra_fields(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path, json.dumps(ROW), "", json.dumps({**ROW, "label": "3", "promptDim": "wanted"}))
    items = load_socialiqa(path)
    assert [i.answer_letter for i in items] == ["A", "C"]
    assert items[0].options == ("work at the jail", "So Robin can eat", "release her")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "items.jsonl:2: malformed JSON"),
        (
            json.dumps({k: v for k, v in ROW.items() if k != "answerB"}),
            "items.jsonl:2: field 'answerB': Field required",
        ),
        (json.dumps({**ROW, "label": "4"}), "items.jsonl:2: field 'label': Input should be '1', '2' or '3'"),
        (json.dumps({**ROW, "context": ""}), "items.jsonl:2: field 'context'"),
        ("[1, 2]", "items.jsonl:2: field '(line)'"),
    ],
)
def test_load_errors_name_file_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    path = write_jsonl(tmp_path, json.dumps(ROW), line)
    with pytest.raises(ValueError) as info:
        load_socialiqa(path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_load_real_sample() -> None:
    if not SAMPLE.exists():
        pytest.skip(f"Social IQa sample not found at {SAMPLE} (set SOTOPIA_SHARED to the shared folder)")
    items = load_socialiqa(SAMPLE)
    assert len(items) == 300
    assert {i.label for i in items} <= {"1", "2", "3"}
    assert {i.answer_letter for i in items} == {"A", "B", "C"}


def test_build_prompt() -> None:
    messages = build_prompt(SocialIQaItem.model_validate(ROW))
    assert [m["role"] for m in messages] == ["user"]
    content = messages[0]["content"]
    for part in (
        ROW["context"],
        ROW["question"],
        "(A) work at the jail",
        "(B) So Robin can eat",
        "(C) release her",
    ):
        assert part in content
    assert "<think>" in content and "<answer>(X) option text</answer>" in content
    assert content.index("(A)") < content.index("(B)") < content.index("(C)")


# --- evaluation -------------------------------------------------------------------------------


def test_wilson_interval_known_values() -> None:
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)


@pytest.mark.parametrize(("successes", "n"), [(1, 0), (-1, 5), (6, 5)])
def test_wilson_interval_rejects_bad_counts(successes: int, n: int) -> None:
    with pytest.raises(ValueError):
        wilson_interval(successes, n)


def test_evaluate_socialiqa() -> None:
    items = [SocialIQaItem.model_validate({**ROW, "label": label}) for label in ("2", "2", "1", "3")]
    completions = [GOOD, GOOD + " extra", GOOD, "I do not know"]
    report = evaluate_socialiqa(items, completions)
    assert report["n"] == 4
    assert report["accuracy"] == 0.5
    assert report["accuracy_ci95"] == wilson_interval(2, 4)
    assert report["format_valid_rate"] == 0.5
    assert report["answer_missing_rate"] == 0.25
    assert report["mean_reward"] == pytest.approx((3.0 + 1.0 - 1.0 - 4.0) / 4)
    assert report["format_valid_ci95"] == wilson_interval(2, 4)
    low, high = report["mean_reward_ci95"]  # mean -0.25, sd sqrt(26.75/3): half-width 1.96 * sd / 2
    assert low == pytest.approx(-0.25 - 1.959964 * (26.75 / 3) ** 0.5 / 2) and high == pytest.approx(-0.25 * 2 - low)
    first, second, third, fourth = report["items"]
    assert first == {
        "index": 0,
        "label": "B",
        "prediction": "B",
        "correct": True,
        "format_valid": True,
        "format_error": None,
        "reward": 3.0,
    }
    assert second["format_error"] == "text after </answer>" and second["correct"]
    assert third["prediction"] == "B" and not third["correct"]
    assert fourth["prediction"] is None and not fourth["correct"]


def test_evaluate_socialiqa_rejects_bad_input() -> None:
    item = SocialIQaItem.model_validate(ROW)
    with pytest.raises(ValueError, match="no items"):
        evaluate_socialiqa([], [])
    with pytest.raises(ValueError, match="column 'items'"):
        evaluate_socialiqa([item], [GOOD, GOOD])
