"""One policy format from training to leaderboard (``sotopia_env.tool_calls``): a policy trained through TRL's tool
calls (``prompt: tools`` in its model directory) is prompted as the TRL environment prompted it, its tool calls are
read back as our actions, and it plays ``benchmark`` and lands on the leaderboard under a card of its own."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sotopia_env.actions import ActionType, AgentAction, InvalidAction
from sotopia_env.agents.llm import LLMAgent
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.backends.tool_wire import tool_template
from sotopia_env.observation import Observation
from sotopia_env.prompt import tools_prompt
from sotopia_env.tool_calls import (
    TOOLS,
    parse_tool_call,
    tool_call_message,
    tool_call_text,
    tool_schemas,
)

MOVES = [
    AgentAction(action_type=ActionType.speak, argument='I could pay "forty" dollars.'),
    AgentAction(action_type=ActionType.non_verbal, argument="nods slowly", to=["Ava"]),
    AgentAction(action_type=ActionType.action, argument="hands over the keys"),
    AgentAction(action_type=ActionType.leave, argument="Goodbye!"),
]
CALL = tool_call_text(AgentAction(action_type=ActionType.speak, argument="Could we share the rent this month?"))


@pytest.mark.parametrize("action", MOVES, ids=lambda a: a.action_type.value)
def test_a_move_round_trips_through_the_tool_call_the_template_renders(action: AgentAction) -> None:
    """action -> the assistant's tool call, rendered by TRL's ChatML tool template (what the policy was trained to
    write) -> the action again."""
    pytest.importorskip("trl")
    from tiny_model import CHAT_TEMPLATE
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_bytes_tokenizer(), bos_token="<|im_start|>", eos_token="<|im_end|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE  # no tool calls: the TRL template is what renders them
    template = tool_template(tokenizer)
    assert template is not None and "<tool_call>" in template
    message = tool_call_message(action)
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}, message], tools=tool_schemas(), chat_template=template, tokenize=False
    )
    reply = rendered.rpartition("<|im_start|>assistant\n")[2].removesuffix("\n").removesuffix("<|im_end|>")
    assert reply.strip() == tool_call_text(action)  # what the model writes is what ``tool_call_text`` writes
    assert parse_tool_call(reply) == action


def test_a_servers_tool_calls_parse_as_the_text_does() -> None:
    """An OpenAI-compatible server's parsed ``tool_calls`` (arguments as a JSON string) give the same move."""
    wire = [{"id": "c1", "type": "function", "function": {"name": "speak", "arguments": '{"words": "hi"}'}}]
    assert parse_tool_call("", wire) == AgentAction(action_type=ActionType.speak, argument="hi")


@pytest.mark.parametrize(
    "reply",
    [
        "Sure, I will pay forty.",  # no call at all
        '{"action_type": "speak", "argument": "hi"}',  # our JSON, not a call
        "<tool_call>\n{not json}\n</tool_call>",
        '<tool_call>\n{"name": "dance", "arguments": {"words": "hi"}}\n</tool_call>',
        '<tool_call>\n{"name": "speak", "arguments": {"text": "hi"}}\n</tool_call>',
        '<tool_call>\n{"name": "speak", "arguments": {"words": 3}}\n</tool_call>',
        '<tool_call>\n{"name": "speak", "arguments": {"words": "hi", "to": [""]}}\n</tool_call>',
    ],
)
def test_a_malformed_call_is_invalid(reply: str) -> None:
    with pytest.raises(InvalidAction):
        parse_tool_call(reply)


def _observation(library, setup_at, **changes) -> Observation:
    from sotopia_env.observation import SeatView

    setup = setup_at(library, "friend")
    obs = Observation.from_env(SeatView.of(setup, 0).observe([], 0, [a.value for a in ActionType]))
    return obs.model_copy(update=changes)


def test_a_malformed_call_is_an_agent_error_after_the_retries(library, setup_at) -> None:
    """Under ``tools`` the agent sends the tools, retries a reply without a valid call, then fails the move as it
    does invalid JSON: an agent error, not a crash."""
    bad = ["no call", '<tool_call>{"name": "dance", "arguments": {}}</tool_call>', "<tool_call>{oops</tool_call>"]
    backend = ScriptedBackend(bad)
    agent = LLMAgent(backend, prompt=TOOLS)
    action = asyncio.run(agent.act(_observation(library, setup_at)))
    assert action.action_type is ActionType.none and action.error and "no valid action after 3" in action.error
    assert agent.usage.errors == 1 and len(backend.requests) == 3
    assert all(r.tools == tool_schemas() and r.json_schema is None for r in backend.requests)

    fixed = LLMAgent(ScriptedBackend(["no call", CALL]), prompt=TOOLS)
    assert asyncio.run(fixed.act(_observation(library, setup_at))).argument == "Could we share the rent this month?"


def test_the_prompt_is_the_conversation_the_trl_environment_shows() -> None:
    """Played move by move through ``SeatSession`` (what ``SocialToolEnv`` and the rollouts show the policy: the
    opening, then a tool call and its answer per move), the conversation equals ``tools_prompt`` of the seat's
    observation at every move."""
    from sotopia_env.agents.base import reset_agent
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.training.seat_rows import SessionMaker, seat_rows

    async def play(row) -> int:
        session = SessionMaker().open(row)
        expert = load_agent("sotopia_env.training.experts:VerifiableExpert")
        reset_agent(expert, session.setup, session.seat)
        turn = await session.start()
        shown, moves = list(turn.messages), 0
        while not turn.done:
            assert tools_prompt(turn.observation) == shown
            call = tool_call_message(await expert.act(turn.observation))
            turn = await session.step(parse_tool_call("", call["tool_calls"]))
            shown += [call, {"role": "tool", "name": call["tool_calls"][0]["function"]["name"], "content": turn.update}]
            moves += 1
        return moves

    assert asyncio.run(play(seat_rows("bargaining:train")[1])) >= 2


@pytest.fixture(scope="module")
def trl_model_dir(tmp_path_factory) -> Path:
    """A tiny random model saved as TRL training saves one: the tokenizer with the tool template it was trained
    with, and ``sotopia_model.json`` saying ``prompt: tools``."""
    pytest.importorskip("trl")
    from tiny_model import make_tiny_model
    from transformers import AutoTokenizer

    from sotopia_env.model_ref import write_model_ref

    path = tmp_path_factory.mktemp("trl-policy")
    corpus = ["<tool_call>", CALL, 'Hello {"name": "speak", "arguments": {"words": "hi"}}'] * 5
    make_tiny_model(path, corpus, vocab_size=400, hidden=32, heads=2, kv_heads=1, pad_token="<|im_end|>")
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = tool_template(tokenizer)
    tokenizer.save_pretrained(path)
    write_model_ref(path, str(path), None, TOOLS)
    return path


def test_a_trl_format_model_plays_benchmark_and_gets_its_own_card(trl_model_dir, tmp_path, monkeypatch) -> None:
    """``benchmark --model DIR`` plays the directory through the local backend under ``tools``: the model is given
    the tools and its own earlier calls, and its call is its move (the random model's own words replaced by a fixed
    valid call: it was never trained to call). Its rows land on a board whose card names ``tools``, never on the
    board of the same model prompted otherwise."""
    from sotopia_env.backends.local import LocalBackend
    from sotopia_env.backends.resolve import prompt_for_model, release_backends
    from sotopia_env.cli.main import app
    from sotopia_env.episodes.leaderboard import leaderboard
    from sotopia_env.episodes.sqlite_store import SQLiteStore

    spec = str(trl_model_dir)
    assert prompt_for_model(spec) == TOOLS
    shown: list[str] = []
    generate = LocalBackend.generate

    async def calls_a_tool(self, requests):
        shown.extend(self._prompt(r.messages, r.tools) for r in requests)
        return [replace(c, text=CALL) if c.ok else c for c in await generate(self, requests)]

    monkeypatch.setattr(LocalBackend, "generate", calls_a_tool)
    store = f"sqlite:///{tmp_path / 'e.db'}"
    common = ["--partner", "custom_agents:Quiet", "--scenarios", "accommodation-drum-practice", "--store", store]
    common += ["--evaluator", "rule-based", "--max-turns", "4"]
    try:
        result = CliRunner().invoke(app, ["benchmark", "--model", spec, "--tag", "trl", *common])
        assert result.exit_code == 0, result.output
    finally:
        release_backends({spec})
    assert shown and all('"name": "speak"' in p and "<tools>" in p for p in shown)  # the schemas, rendered
    assert any('<tool_call>\n{"name": "speak"' in p for p in shown)  # its own earlier move, as a call

    (board,) = [b for b in leaderboard(SQLiteStore(store)) if any(r.model == spec for r in b.rows)]
    assert board.card.prompts and any(p.startswith(f"{TOOLS}@") for p in board.card.prompts)
    (row,) = [r for r in board.rows if r.model == spec]
    assert row.rated >= 1 and row.failed == 0 and row.goal is not None
    assert TOOLS in dict(board.card.summary())["prompts"]


def _bytes_tokenizer():
    """A byte-level BPE with the ChatML tokens, enough to render and read back a conversation."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator([json.dumps({"name": "speak"})] * 3, trainer)
    return bpe


def test_a_server_gets_the_tools_and_the_calls_in_openais_wire_format(library, setup_at) -> None:
    """Behind an OpenAI-compatible server (a real one on loopback) the request carries ``tools`` and the earlier
    calls as OpenAI writes them (an id, the arguments as a JSON string, the answer's ``tool_call_id``); a server
    without a tool parser answers the call as text, which is read as the local backend's is."""
    from loopback_openai import LoopbackOpenAI, Reply

    from sotopia_env.backends.openai_http import OpenAIHTTPBackend
    from sotopia_env.observation import HistoryEntry

    obs = _observation(library, setup_at)
    me, other = obs.agent, "Someone Else"
    history = [
        HistoryEntry(turn=0, agent=me, action_type="speak", argument="Hi there."),
        HistoryEntry(turn=1, agent=other, action_type="speak", argument="Hello."),
    ]
    obs = obs.model_copy(update={"history": history, "turn": 2})
    with LoopbackOpenAI(lambda body: Reply(CALL)) as server:
        agent = LLMAgent(OpenAIHTTPBackend("policy", api_base=server.base_url), prompt=TOOLS)
        action = asyncio.run(agent.act(obs))
        (body,) = server.requests
    assert action.argument == "Could we share the rent this month?" and action.error is None
    assert body["tools"] == tool_schemas() and "response_format" not in body
    call, answer = body["messages"][2], body["messages"][3]
    (wire,) = call["tool_calls"]
    assert json.loads(wire["function"]["arguments"]) == {"words": "Hi there."}
    assert answer["role"] == "tool" and answer["tool_call_id"] == wire["id"] and "Hello." in answer["content"]
