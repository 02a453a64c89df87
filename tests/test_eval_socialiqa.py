import re

from sotopia_env.cli.eval_cmds import THINK_ANSWER_REGEX
from sotopia_env.training.rewards import check_format, parse_choice


def test_the_constraint_admits_exactly_well_formed_answers():
    good = "<think>They want to eat.</think><answer>(B) So Robin can eat</answer>"
    assert re.fullmatch(THINK_ANSWER_REGEX, good)
    check = check_format(good)
    assert check.valid and parse_choice(check.answer) == "B"
    for bad in [
        "<think>x</think> <answer>(B) y</answer>",  # text between the tags
        "<think>x</think><answer>(D) y</answer>",  # no such option
        "<think>x</think><answer>(B) y (C) z</answer>",  # two letters
        "<answer>(B) y</answer>",
    ]:
        assert not re.fullmatch(THINK_ANSWER_REGEX, bad), bad
