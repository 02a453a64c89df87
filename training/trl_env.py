"""Our worlds as a TRL environment: ``GRPOTrainer(environment_factory=tool_env_factory(), train_dataset=...)``.

TRL (>= 0.29, experimental there) makes one ``SocialToolEnv`` per rollout, calls ``reset(**row)`` with a dataset
row (``seat_rows.trl_dataset``: the scenario, the seat, the seed, the partners and the judge, and a ``prompt``
that holds the seat's system message), and appends what ``reset`` returns to the prompt's user message. Every
other public method is a tool the model calls; ``get_reward`` owns the reward.

- **What the model sees.** The first prompt is exactly what an ``LLMAgent`` in that seat would be prompted with
  (``sotopia_env.prompt.render_prompt``: the system message from the row, the user message from ``reset``). Each
  tool's answer is what is new to the seat: the moves since its own (partners', the game master's, and private
  messages addressed to it) and whose move it is, as the prompt renders them (``SeatTurn.update``).
- **The tools** are the seat's actions: ``speak``, ``non_verbal``, ``physical_action`` (a game's vote or night
  move: one of the listed choices) and ``leave``; ``to`` addresses a move to some of the others where three or more
  are present. Each call is one move: the partners then play up to the seat's next move. A move the seat cannot
  make comes back as the tool's answer (``Your move was not accepted: ...``), and the seat moves again; it never
  ends the rollout.
- **The reward** is the judge's goal score for the seat (exact on verifiable scenarios and games, the row's LLM
  judge on SOTOPIA scenarios), once the episode is over. A rollout that stops before the end (no tool call, or
  out of tokens) ends the episode as our own agents would: the seat's pending move fails (an agent error). An
  episode the judge could not rate gives ``None``: TRL leaves it out of the group's baseline and gives it no
  advantage, never a 0.

``tool_chat_template`` gives a tokenizer without tool support (the embedded SmolLM2's) TRL's own ChatML template
with tools (``trl/chat_templates/qwen2_5.jinja``); ``expert_tool_dataset`` turns an expert's episodes into
tool-call conversations for a supervised warm start (untrained, a 135M model calls no tool at all).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from sotopia_env.actions import ActionType
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.observation import Observation
from sotopia_env.tool_calls import TOOL_OF as TOOL_OF  # re-exported: the rollouts and verl import it from here
from sotopia_env.tool_calls import SeatTools
from sotopia_env.tool_calls import tool_call_message as tool_call_message
from sotopia_env.tool_calls import tool_schemas as tool_schemas
from sotopia_env.training.seat_rows import SeatRow, SessionMaker
from sotopia_env.training.seat_session import BackgroundLoop, SeatSession, SeatTurn

EpisodeCallback = Callable[[EpisodeLog | None, float | None], None]


class SocialToolEnv(SeatTools):
    """One rollout's episode for TRL's ``environment_factory``; see the module docstring. Its tools (the seat's
    moves) are ``SeatTools``' methods, shared with ``LLMAgent``'s ``tools`` prompt (``sotopia_env.tool_calls``)."""

    def __init__(self, maker: SessionMaker | None = None, on_episode: EpisodeCallback | None = None) -> None:
        self._maker = maker or SessionMaker()
        self._on_episode = on_episode
        self._loop = BackgroundLoop.shared()
        self._session: SeatSession | None = None
        self._turn: SeatTurn | None = None
        self._reward: float | None = None

    @property
    def observation(self) -> Observation | None:
        """The seat's current observation (None before ``reset``); a property, so not a tool."""
        return self._turn.observation if self._turn is not None else None

    @property
    def done(self) -> bool:
        """Whether the episode is over."""
        return self._turn is not None and self._turn.done

    def reset(self, **row: Any) -> str:
        """Start the row's episode; the seat's first user message (partners who move first have moved)."""
        if self._session is not None:
            self._session.close()
        self._reward = None
        self._session = self._maker.open(SeatRow.model_validate(row))
        self._turn = self._loop.run(self._session.start())
        prompt = row.get("prompt")
        if prompt and prompt[0].get("role") == "system" and prompt[0]["content"] != self._turn.messages[0]["content"]:
            raise ValueError(
                f"row {row.get('scenario')!r} seat {row.get('seat')}: its prompt's system message is not this seat's "
                "(build the dataset with seat_rows.trl_dataset)"
            )
        return self._turn.messages[-1]["content"]

    def get_reward(self) -> float | None:
        """The judge's goal score for the seat (the episode is finished first); None when it could not be rated."""
        if self._session is None:
            return None
        if self._turn is not None and not self._turn.done:
            self._loop.run(self._session.finish())
            self._turn = self._session.turn
        reward = self._session.reward
        if self._on_episode is not None:
            self._on_episode(self._session.log, reward)
        return reward

    def _move(self, kind: ActionType, argument: str, to: list[str] | None) -> str:
        if self._session is None:
            return "Your move was not accepted: no episode has started."
        action = {"action_type": kind.value, "argument": argument, **({"to": to} if to is not None else {})}
        self._turn = self._loop.run(self._session.step(action))
        return self._turn.update


def tool_env_factory(
    maker: SessionMaker | None = None, on_episode: EpisodeCallback | None = None
) -> Callable[[], SocialToolEnv]:
    """``environment_factory`` for ``GRPOTrainer``: every environment shares ``maker`` (the library, the judges and
    their backends); ``on_episode(log, reward)`` is called with each finished episode."""
    maker = maker or SessionMaker()
    return lambda: SocialToolEnv(maker, on_episode)


# -- the model's side ---------------------------------------------------------------------------------------------


def tool_chat_template(tokenizer: Any) -> Any:
    """``tokenizer`` with a chat template that renders tool calls: unchanged when it has one (TRL's
    ``supports_tool_calling``), else TRL's ChatML template with tools (``qwen2_5.jinja``), for ChatML tokenizers such
    as SmolLM2's. ValueError (one line) for a tokenizer that is neither."""
    from trl.chat_template_utils import supports_tool_calling

    if supports_tool_calling(tokenizer):
        return tokenizer
    vocab = tokenizer.get_vocab()
    if "<|im_start|>" not in vocab or "<|im_end|>" not in vocab:
        raise ValueError("the tokenizer's chat template has no tool calls and it is not ChatML: give it a template")
    tokenizer.chat_template = (resources.files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()
    return tokenizer


async def play_through_tools(session: SeatSession, agent: Any) -> list[dict[str, Any]]:
    """Play ``session`` with ``agent`` in the seat as a tool-calling conversation: the messages a model would have
    seen and written (system, user, then a tool call and its answer per move, and a closing empty reply)."""
    turn = await session.start()
    messages: list[dict[str, Any]] = list(turn.messages)
    while not turn.done:
        action = await agent.act(turn.observation)
        call = tool_call_message(action)
        if call is None:
            raise ValueError(f"{type(agent).__name__} made a {action.action_type.value!r} move, which no tool takes")
        turn = await session.step(action)
        messages += [call, {"role": "tool", "name": call["tool_calls"][0]["function"]["name"], "content": turn.update}]
    return [*messages, {"role": "assistant", "content": ""}]


def tool_transcripts(
    rows: Sequence[SeatRow],
    expert: str = "sotopia_env.training.experts:VerifiableExpert",
    min_reward: float | None = 1.0,
    maker: SessionMaker | None = None,
) -> list[list[dict[str, Any]]]:
    """``expert`` (an agent spec) plays each row's seat through the tools; the conversations whose reward reaches
    ``min_reward`` (None: all)."""
    from sotopia_env.agents.base import reset_agent
    from sotopia_env.agents.loading import load_agent

    maker = maker or SessionMaker()
    loop = BackgroundLoop.shared()
    kept = []
    for row in rows:
        session = maker.open(row)
        agent = load_agent(expert)
        reset_agent(agent, session.setup, session.seat)
        messages = loop.run(play_through_tools(session, agent))
        if min_reward is None or (session.reward is not None and session.reward >= min_reward):
            kept.append(messages)
    return kept


def expert_tool_dataset(
    transcripts: Sequence[list[dict[str, Any]]], tokenizer: Any, max_moves: int | None = None
):  # fmt: skip
    """A tokenised ``datasets.Dataset`` for TRL's ``SFTTrainer``: ``input_ids`` and ``assistant_masks`` (1 on the
    tool calls and the closing reply: the loss is on them only) of each conversation, rendered with the tools by
    TRL's training variant of the chat template; ``max_moves`` keeps each conversation's first moves only (a
    cheaper warm start). Tokenised here because Arrow would merge the tools' argument structs (``words`` and
    ``description``) into one, with nulls."""
    from datasets import Dataset
    from trl.chat_template_utils import get_training_chat_template

    template = get_training_chat_template(tool_chat_template(tokenizer))
    tools = tool_schemas()
    rows = []
    for messages in transcripts:
        if max_moves is not None:
            calls = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
            messages = messages[: calls[min(max_moves, len(calls)) - 1] + 1]
        out = tokenizer.apply_chat_template(
            messages, tools=tools, chat_template=template, return_dict=True, return_assistant_tokens_mask=True
        )
        rows.append({"input_ids": list(out["input_ids"]), "assistant_masks": list(out["assistant_masks"])})
    return Dataset.from_list(rows)
