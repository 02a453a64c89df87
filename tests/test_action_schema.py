"""The action schema's constraints: speak, non-verbal and action need words; none and leave take anything.

Checked three ways: against ``jsonschema`` (what a server with structured output enforces), against the
grammar the local backend compiles (xgrammar, on the tiny test tokenizer), and through decoding itself.
Also the hosted-provider form of the schema and the reply-only repetition penalty.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import string
import sys
from pathlib import Path

import jsonschema
import pytest

from sotopia_env.actions import ACTION_TYPES, MAX_ARGUMENT_CHARS, WORDED_ACTIONS, action_json_schema
from sotopia_env.backends.base import ChatRequest, GenerationSettings
from sotopia_env.backends.local import LocalBackend
from sotopia_env.backends.remote import hosted_schema

ACCEPTED = [
    ("speak", "Hi, do you have a minute?"),
    ("speak", 'She said "no" twice'),
    ("non-verbal communication", "smiles"),
    ("action", "hands over the keys"),
    ("speak", "x" * MAX_ARGUMENT_CHARS),
    ("leave", ""),
    ("leave", "..."),
    ("none", ""),
    ("none", "waits"),
]
REJECTED = [
    ("speak", ""),
    ("speak", "..."),
    ("speak", "…"),
    ("speak", " "),
    ("speak", " hello"),  # a leading space
    ("non-verbal communication", ""),
    ("non-verbal communication", "..."),
    ("action", "!?"),
    ("speak", "x" * (MAX_ARGUMENT_CHARS + 1)),
]


def _action(kind: str, argument: str) -> dict[str, str]:
    return {"action_type": kind, "argument": argument}


def _as_decoders_see_it(kind: str, argument: str) -> dict[str, str]:
    """Constrained decoders (xgrammar, here and in vLLM) match a string's pattern against its JSON-escaped text."""
    return _action(kind, json.dumps(argument, ensure_ascii=False)[1:-1])


@pytest.mark.parametrize(("kind", "argument"), ACCEPTED)
def test_schema_accepts_worded_talk_and_any_leave(kind: str, argument: str) -> None:
    jsonschema.validate(_as_decoders_see_it(kind, argument), action_json_schema())


@pytest.mark.parametrize(("kind", "argument"), REJECTED)
def test_schema_rejects_empty_or_punctuation_only_talk(kind: str, argument: str) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_as_decoders_see_it(kind, argument), action_json_schema())


def test_the_grammar_never_writes_an_escape_json_cannot_read(tiny: LocalBackend) -> None:
    """A bare '.' in the pattern let SmolLM2 write don-backslash-quote-t; only JSON's escapes may follow a backslash."""
    good = json.dumps(_action("speak", 'She said "no", then left\\n'), ensure_ascii=False)
    assert _grammar_accepts(tiny, good)
    assert not _grammar_accepts(tiny, r'{"action_type": "speak", "argument": "don\'t know"}')
    for control in ("\x00", "\x1d", "\n"):  # raw control characters, not even as the argument's first character
        text = '{"action_type": "speak", "argument": "' + control + 'hello"}'
        assert not _grammar_accepts(tiny, text), repr(text)
        assert not _grammar_accepts(tiny, text.replace(control + "hello", "hello" + control))


def test_schema_offers_exactly_the_allowed_actions() -> None:
    def kinds(schema: dict) -> list[str]:
        branches = schema.get("anyOf", [schema])
        return sorted(k for b in branches for k in b["properties"]["action_type"]["enum"])

    assert kinds(action_json_schema()) == sorted(ACTION_TYPES)
    assert kinds(action_json_schema(["none"])) == ["none"]
    assert "anyOf" not in action_json_schema(["speak", "action"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_action("leave", ""), action_json_schema(["speak"]))


def test_hosted_schema_is_one_object_with_every_action_and_no_length_or_pattern() -> None:
    schema = hosted_schema(action_json_schema())
    text = json.dumps(schema)
    assert "anyOf" not in schema and "pattern" not in text and "Length" not in text
    assert sorted(schema["properties"]["action_type"]["enum"]) == sorted(ACTION_TYPES)
    assert schema["required"] == ["action_type", "argument"] and schema["additionalProperties"] is False
    jsonschema.validate(_action("speak", "..."), schema)  # hosted models are not held to words; we parse anyway


@pytest.fixture
def tiny(tiny_model_dir: Path) -> LocalBackend:
    return LocalBackend.from_spec(str(tiny_model_dir), batch_window_s=0.01)


def _grammar_accepts(backend: LocalBackend, text: str) -> bool:
    import xgrammar as xgr

    grammar = backend._constraint(ChatRequest(messages=[], json_schema=action_json_schema()))
    matcher = xgr.GrammarMatcher(grammar)
    ids = backend.tokenizer(text, add_special_tokens=False)["input_ids"]
    stop = min(backend._stop_ids)
    return all(matcher.accept_token(i) for i in ids) and matcher.accept_token(stop) and matcher.is_terminated()


def test_local_grammar_enforces_the_same_rules(tiny: LocalBackend) -> None:
    def one_line(kind: str, argument: str) -> str:  # the JSON layout the backend's grammar produces
        return json.dumps(_action(kind, argument), ensure_ascii=False)

    for kind, argument in ACCEPTED:
        assert _grammar_accepts(tiny, one_line(kind, argument)), (kind, argument)
    for kind, argument in REJECTED:
        if len(argument) > MAX_ARGUMENT_CHARS and kind in WORDED_ACTIONS:
            # the grammar holds no length bound for worded arguments (it made each mask step ~300 ms);
            # max_new_tokens bounds them, and the closing reserve ends them as JSON (test below)
            assert _grammar_accepts(tiny, one_line(kind, argument)), (kind, argument)
            continue
        assert not _grammar_accepts(tiny, one_line(kind, argument)), (kind, argument)


def test_a_row_out_of_tokens_closes_its_json(tiny: LocalBackend) -> None:
    """The random tiny model never ends a worded argument by itself; each row still ends as a valid action."""
    requests = [
        ChatRequest(
            [{"role": "user", "content": f"turn {i}"}],
            action_json_schema(["speak"]),
            temperature=1.0,
            max_new_tokens=limit,
            seed=i,
        )
        for i, limit in enumerate([32, 40, 48, 56, 64, 72, 80, 88])
    ]
    outputs = asyncio.run(tiny.generate(requests))
    for request, out in zip(requests, outputs, strict=True):
        assert out.meta["finish_reason"] == "stop", out.text
        assert out.completion_tokens < request.max_new_tokens
        action = json.loads(out.text)
        assert action["action_type"] == "speak" and action["argument"], out.text
    assert tiny.stats.json_truncated == 0


def test_without_the_reserve_the_same_rows_are_cut(tiny: LocalBackend, monkeypatch) -> None:
    """The control: with no closing tokens, the same requests run out of tokens mid-argument."""
    monkeypatch.setattr(tiny, "_closers", [])
    requests = [
        ChatRequest(
            [{"role": "user", "content": f"turn {i}"}],
            action_json_schema(["speak"]),
            temperature=1.0,
            max_new_tokens=24,
            seed=i,
        )
        for i in range(4)
    ]
    outputs = asyncio.run(tiny.generate(requests))
    assert sum(out.meta["finish_reason"] == "length" for out in outputs) >= 3


def test_constrained_decoding_never_opens_talk_without_a_word(tiny: LocalBackend) -> None:
    """The random tiny model rambles past any limit, so this looks at how each argument opens."""
    schema = action_json_schema()
    requests = [
        ChatRequest([{"role": "user", "content": f"turn {i}"}], schema, temperature=1.0, max_new_tokens=48, seed=i)
        for i in range(8)
    ]
    opened = re.compile(r'^\{"action_type": "([^"]+)", "argument": "(.+)', re.DOTALL)
    talk = 0
    for out in asyncio.run(tiny.generate(requests)):
        match = opened.match(out.text)
        assert match, out.text
        kind, rest = match.groups()
        first = _first_char(rest)
        if kind in ("speak", "non-verbal communication", "action") and first:  # "" where cut mid-escape
            talk += 1
            assert first not in string.punctuation + string.whitespace + "…", out.text
    assert talk, "no request chose a worded action"


def _first_char(json_string_body: str) -> str:
    """The first character of a JSON string body that may be cut anywhere (escapes decoded)."""
    for end in range(min(len(json_string_body), 12), 0, -1):
        try:
            return json.loads(f'"{json_string_body[:end]}"', strict=False)[0]
        except (ValueError, IndexError):
            continue
    return ""


def test_settings_carry_the_repetition_penalty() -> None:
    request = GenerationSettings(repetition_penalty=1.3, seed=5).request([], None, seed_offset=2)
    assert request.repetition_penalty == 1.3 and request.seed == 7
    assert GenerationSettings().request([]).repetition_penalty == 1.0


def test_repetition_penalty_counts_the_reply_not_the_prompt(tiny: LocalBackend) -> None:
    def greedy(penalty: float) -> list[int]:
        request = ChatRequest([{"role": "user", "content": "hello there"}], temperature=0.0, max_new_tokens=24)
        request.repetition_penalty = penalty
        (out,) = asyncio.run(tiny.generate([request]))
        return tiny.tokenizer(out.text, add_special_tokens=False)["input_ids"]

    plain, penalised = greedy(1.0), greedy(50.0)
    print(plain, penalised)
    assert len(plain) - len(set(plain)) > len(penalised) - len(set(penalised))  # fewer repeats in the reply
    assert plain[0] == penalised[0]  # the first token is free: the prompt's tokens are not penalised


@pytest.mark.model
def test_the_action_grammar_costs_under_a_millisecond_per_step(embedded_model_path: str) -> None:
    """The mask is filled row by row, each step: at ~300 ms (a bounded repetition in the pattern) it cost
    several times the model's own step. SmolLM2's real tokenizer, the shipped schema, realistic actions."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from grammar_mask import ADDRESSED, MULTI_PARTY, VOTE, VOTES, mask_costs

    backend = LocalBackend.from_spec("smollm2-135m")
    for schema, actions in ((action_json_schema(), None), (MULTI_PARTY, ADDRESSED), (VOTE, VOTES)):
        costs = mask_costs(backend, schema, actions=actions) if actions else mask_costs(backend, schema)
        assert len(costs) > (50 if actions is None else 10)
        assert statistics.mean(costs) < 1e-3 and statistics.median(costs) < 1e-3, max(costs)
