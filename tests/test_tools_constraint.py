"""Constrained decoding of ``tools`` replies (issue 59): on the local backend, a policy trained through tool calls
(``prompt: tools`` in its model directory) writes one valid tool call of the seat's tools per move, as its chat
template writes a call (``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``), through an xgrammar
grammar built from ``tool_calls.tool_call_schema`` and ``tool_wire.call_format``. With the real embedded model."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from sotopia_env.actions import ActionType, AgentAction, InvalidAction
from sotopia_env.agents.llm import CHAT_SETTINGS, LLMAgent
from sotopia_env.backends.base import ChatRequest, GenerationSettings
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.runner import play
from sotopia_env.tool_calls import TOOLS, parse_tool_call, tool_call_schema, tool_call_text, tool_schemas

pytestmark = pytest.mark.model

CALL_TEXT = re.compile(r'<tool_call>\n(\{"name": .*\})\n</tool_call>', re.DOTALL)
MESSAGES = [
    {"role": "system", "content": "You are Ava Park. Your goal: borrow your neighbour's ladder this weekend."},
    {"role": "user", "content": "Your neighbour Ben says: 'Morning! What can I do for you?' Make your move."},
]


@pytest.fixture(scope="module")
def tools_model_dir(embedded_model_path, tmp_path_factory) -> Path:
    """The embedded model recorded as a TRL-trained policy: ``sotopia_model.json`` says ``prompt: tools`` (its
    tokenizer has no tool template of its own, so TRL's ChatML one renders the calls, as in training)."""
    pytest.importorskip("trl")
    from sotopia_env.model_ref import write_model_ref

    path = tmp_path_factory.mktemp("tools-policy")
    write_model_ref(path, embedded_model_path, None, TOOLS)
    return path


@pytest.fixture(scope="module")
def backend(tools_model_dir):
    from sotopia_env.backends.local import LocalBackend

    local = LocalBackend.from_spec(str(tools_model_dir), device="cpu")
    assert local.preferred_prompt == TOOLS
    yield local
    local.close()


def _spy(backend, monkeypatch) -> list:
    """Every completion the backend returns (the real model's; nothing replaced)."""
    seen: list = []
    generate = type(backend).generate

    async def recorded(self, requests):
        completions = await generate(self, requests)
        seen.extend(zip(requests, completions, strict=True))
        return completions

    monkeypatch.setattr(type(backend), "generate", recorded)
    return seen


def _episode(backend, two_friends, constrained: bool = True):
    settings = GenerationSettings(**CHAT_SETTINGS)  # what ``run`` plays with: greedy, penalty, topic nudge
    agents = [LLMAgent(backend, settings=settings, max_retries=0, constrained=constrained) for _ in range(2)]
    return asyncio.run(play(two_friends, agents, None, EnvConfig(max_turns=4)))


def test_a_tools_policy_plays_an_episode_of_valid_tool_calls(backend, two_friends, monkeypatch) -> None:
    """Every move of a short episode is one tool call of the seat's tools, exactly as the template writes a call,
    and parses as the move played: 0 invalid moves, no retries needed (``max_retries=0``)."""
    seen = _spy(backend, monkeypatch)
    log = _episode(backend, two_friends)
    assert log.turns and all(t.action.error is None for t in log.turns)
    assert all(n == 0 for n in log.agent_errors.values())
    assert len(seen) == len(log.turns)
    for request, completion in seen:
        assert request.tools == tool_schemas() and request.call_schema is not None and request.json_schema is None
        assert completion.meta["constrained"] and completion.meta["finish_reason"] == "stop", completion.text
        body = CALL_TEXT.fullmatch(completion.text)
        assert body, completion.text
        assert json.loads(body.group(1))["name"] in {"speak", "non_verbal", "physical_action", "leave"}
        parse_tool_call(completion.text)
    played = [t.action for t in log.turns]
    assert [parse_tool_call(c.text) for _, c in seen] == [
        AgentAction(action_type=a.action_type, argument=a.argument, to=a.to) for a in played
    ]


def test_without_the_constraint_the_same_model_makes_invalid_moves(backend, two_friends) -> None:
    """The control: unconstrained, the (untrained) embedded model writes prose, not calls, so the moves above are
    valid because of the grammar."""
    log = _episode(backend, two_friends, constrained=False)
    assert sum(log.agent_errors.values()) >= 1


def test_a_long_reply_still_ends_as_a_whole_call(backend) -> None:
    """Sampled rows cut short by ``max_new_tokens`` close the argument in time and still write the call's suffix
    (the grammar's reserve covers ``</tool_call>``'s tokens, not only JSON's closers)."""
    schema = tool_call_schema()
    requests = [
        ChatRequest(MESSAGES, temperature=1.0, max_new_tokens=40, seed=s, tools=tool_schemas(), call_schema=schema)
        for s in range(4)
    ]
    truncated = backend.stats.json_truncated
    for completion in asyncio.run(backend.generate(requests)):
        assert completion.meta["finish_reason"] == "stop", completion.text
        assert isinstance(parse_tool_call(completion.text), AgentAction)
    assert backend.stats.json_truncated == truncated


def test_the_call_follows_the_observation(backend) -> None:
    """A game's vote: only ``physical_action`` is available and its description is one of the choices."""
    choices = ["vote for Ana Ruiz", "vote for Bo Li"]
    schema = tool_call_schema(["action"], choices=choices)
    requests = [
        ChatRequest(MESSAGES, temperature=1.0, max_new_tokens=60, seed=s, tools=tool_schemas(), call_schema=schema)
        for s in range(3)
    ]
    for completion in asyncio.run(backend.generate(requests)):
        action = parse_tool_call(completion.text)
        assert action.action_type is ActionType.action and action.argument in choices


def test_the_grammar_admits_calls_and_refuses_what_is_not_one(backend) -> None:
    """The compiled grammar, walked by xgrammar itself: a valid call of each tool (with ``to`` where there are
    recipients) is accepted to its end; a prose reply, an unknown tool, an extra argument, ``to`` on ``leave`` or a
    recipient not present are refused."""
    import xgrammar as xgr

    def accepts(text: str, schema) -> bool:
        grammar = backend._constraint(ChatRequest([], tools=tool_schemas(), call_schema=schema))
        matcher = xgr.GrammarMatcher(grammar)
        return bool(matcher.accept_string(text)) and matcher.is_completed()

    people = tool_call_schema(recipients=["Ana Ruiz", "Bo Li"])
    for move in [
        AgentAction(action_type=ActionType.speak, argument="Could we share the rent?"),
        AgentAction(action_type=ActionType.non_verbal, argument="nods", to=["Bo Li"]),
        AgentAction(action_type=ActionType.action, argument="hands over the keys"),
        AgentAction(action_type=ActionType.leave, argument="Goodbye!"),
    ]:
        assert accepts(tool_call_text(move), people), move
    call = '<tool_call>\n{{"name": "{}", "arguments": {}}}\n</tool_call>'
    assert not accepts("Sure, I will pay forty.", people)
    assert not accepts(call.format("dance", '{"words": "hi"}'), people)
    assert not accepts(call.format("speak", '{"words": "hi", "mood": "glad"}'), people)
    assert not accepts(call.format("leave", '{"words": "Bye", "to": ["Bo Li"]}'), people)
    assert not accepts(call.format("speak", '{"words": "hi", "to": ["Cy Diaz"]}'), people)
    assert not accepts(call.format("speak", '{"words": "hi"}').replace("\n</tool_call>", ""), people)
    with pytest.raises(InvalidAction):
        parse_tool_call(call.format("dance", '{"words": "hi"}'))


def test_the_call_format_is_read_off_the_template(backend) -> None:
    """``call_format`` of TRL's ChatML tool template: Hermes markers and ``json.dumps``'s separators."""
    from sotopia_env.backends.tool_wire import call_format

    form = call_format(backend.tokenizer, backend._tools_template(), ["<|im_end|>"])
    assert (form.prefix, form.suffix, form.separators) == ("<tool_call>\n", "\n</tool_call>", (", ", ": "))


def test_other_prompts_are_constrained_as_before(backend) -> None:
    """A JSON-action request on the same backend is still constrained to the action schema (no tool markers)."""
    from sotopia_env.actions import action_json_schema, parse_action

    request = ChatRequest(MESSAGES, json_schema=action_json_schema(), temperature=0.0, max_new_tokens=60)
    (completion,) = asyncio.run(backend.generate([request]))
    assert completion.meta["constrained"] and "<tool_call>" not in completion.text
    parse_action(completion.text)
