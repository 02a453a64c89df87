"""A whole generation batch of episodes at once under TRL: ``GRPOTrainer(rollout_func=episode_rollouts(maker, tok))``.

Why not ``environment_factory``: TRL 1.16's ``GRPOTrainer`` calls ``reset`` once per sample, the tools of one sample
after another in ``_tool_call_loop`` (async tools are gathered only within a sample, then awaited before the next),
and ``get_reward`` in a loop (an async one is awaited sample after sample too). With an LLM partner or an LLM judge
every partner turn and judge call of a batch then waits on the previous one. A ``rollout_func`` owns the whole
batch, so here the batch advances in lock step as TRL's tool loop does (generate one turn for every live sample,
then answer every tool call) but the answers (the partners' turns) and the openings and the judge calls of all
samples run concurrently on the process's ``BackgroundLoop``, where their backends meet.

- **Rows.** ``rollout_dataset(rows, maker)`` is ``seat_rows.trl_dataset`` whose user message also carries the row
  (``"row"``: its JSON; TRL hands a ``rollout_func`` the prompts only, not the other columns).
- **What the model sees** is what ``SocialToolEnv`` shows it: the seat's system message and opening rendered with
  the tools' schemas (``trl_env.tool_schemas``), and after each tool call the tool's answer (``SeatTurn.update``),
  appended as TRL appends tool results (a tool message after the dummy-conversation prefix, as
  ``GRPOTrainer._get_tool_suffix_ids`` does). The answers are masked out of the loss (``env_mask`` 0).
- **Budget.** A sample ends when it makes no tool call, after ``max_tool_calling_iterations`` calls, when the episode
  is over, or when its completion (moves and answers) would pass ``max_completion_length``: then the last answer is
  dropped, as TRL drops it, and the episode is finished as our agents would (the pending move fails).
- **Reward.** Every episode is finished and rated at the end, all judges at once; ``episode_reward`` (a reward
  function) returns the judge's goal score, ``None`` when it could not be rated (TRL leaves it out of the baseline).
- **Self-play.** A row whose partner is ``SELF`` (``"self"``) has the policy in those seats too. The batch's
  k-th prompt of each seat of one start (rows equal but for their seat) share the k-th episode, each a sample of
  its own seat with its own seat's rating; TRL's groups are per prompt, so advantages are per (start, seat). A
  driven seat no prompt of the batch asks for is played by the policy as a shadow (not returned). Each round the
  batch waits until every episode has a seat to move (``_settle``), so seats of one episode move in turn.
- **The policy** is ``TrainerPolicy`` (the trainer's own generation: vLLM or transformers, weights synced as TRL
  syncs them) unless ``policy=`` gives another (``ScriptedToolPolicy`` in the tests and the benchmark).
"""

from __future__ import annotations

import concurrent.futures
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sotopia_env.training.seat_rows import SELF, SeatRow, SessionMaker
from sotopia_env.training.seat_session import BackgroundLoop, SeatSession, SeatTurn
from sotopia_env.training.trl_env import TOOL_OF, EpisodeCallback, tool_chat_template, tool_schemas

ACTION_OF_TOOL = {name: (kind, text) for kind, (name, text) in TOOL_OF.items()}
REWARD_FIELD = "episode_reward"
HERMES_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


class Policy(Protocol):
    """One turn of the policy for a batch of token prefixes: the new token ids and their log-probs (or None)."""

    def generate(self, prefixes: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]: ...


class TrainerPolicy:
    """The trainer's own generation (``GRPOTrainer._generate_single_turn``: vLLM, colocated or served, or
    transformers; one completion per prefix, capped at ``max_completion_length``)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def generate(self, prefixes: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]:
        return self.trainer._generate_single_turn(prefixes, None, {}, 1)


class ScriptedToolPolicy:
    """A policy without a model: every turn is ``text`` (a rendered tool call) then the end-of-turn token; for tests
    and benchmarks, where what is measured is the environment's side."""

    def __init__(self, tokenizer: Any, text: str) -> None:
        self.ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        self.calls = 0

    def generate(self, prefixes: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]:
        self.calls += 1
        return [list(self.ids) for _ in prefixes], [[0.0] * len(self.ids) for _ in prefixes]


def speak_call(words: str) -> str:
    """The text of a ``speak`` tool call as Hermes/ChatML templates (TRL's ``qwen2_5.jinja``) render it."""
    return "<tool_call>\n" + json.dumps({"name": "speak", "arguments": {"words": words}}) + "\n</tool_call>"


@dataclass
class _Sample:
    """One rollout: its session, its token ids so far, and whether it still moves."""

    session: SeatSession
    index: int | None = None  # its prompt's place in the batch; None: a self-play shadow seat (not returned)
    prompt_ids: list[int] = field(default_factory=list)
    completion: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)  # 1: the policy's tokens, 0: the tools' answers
    live: bool = True
    calls: int = 0
    last_tool: str = ""  # the tool of its last call (whose answer comes next)
    pending: concurrent.futures.Future[SeatTurn] | None = None  # its start or move, on the background loop
    ending: concurrent.futures.Future[Any] | None = None  # its ``finish``, once it stopped moving


def row_of(prompt: list[dict[str, Any]]) -> SeatRow:
    """The row a prompt of ``rollout_dataset`` carries; ValueError (one line) for a prompt without one."""
    carried = prompt[-1].get("row") if prompt else None
    if not carried:
        raise ValueError("a prompt without its row: build the dataset with trl_rollouts.rollout_dataset")
    return SeatRow.model_validate_json(carried)


def rollout_dataset(rows: Sequence[SeatRow], maker: SessionMaker | None = None):
    """``seat_rows.trl_dataset``, its user message carrying the row (TRL gives a ``rollout_func`` prompts only)."""
    from sotopia_env.training.seat_rows import trl_dataset

    data = trl_dataset(rows, maker)

    def carry(record: dict[str, Any], index: int) -> dict[str, Any]:
        system, user = record["prompt"]
        return {"prompt": [{**system, "row": None}, {**user, "row": rows[index].model_dump_json()}]}

    return data.map(carry, with_indices=True)


def episode_reward(completions: list[Any], episode_reward: list[float | None], **_: Any) -> list[float | None]:
    """The reward function that goes with ``episode_rollouts``: the judge's score of each rollout's episode."""
    return list(episode_reward)


class EpisodeRollouts:
    """The ``rollout_func``; see the module docstring. ``on_episode(log, reward)`` gets each finished episode."""

    __name__ = "episode_rollouts"

    def __init__(
        self,
        maker: SessionMaker,
        tokenizer: Any,
        policy: Policy | None = None,
        on_episode: EpisodeCallback | None = None,
        loop: BackgroundLoop | None = None,
    ) -> None:
        from trl.chat_template_utils import (
            add_response_schema,
            get_training_chat_template,
            is_chat_template_prefix_preserving,
        )

        self.maker, self.on_episode = maker, on_episode
        self.tokenizer = tool_chat_template(tokenizer)
        if getattr(self.tokenizer, "response_template", None) is None and not getattr(
            self.tokenizer, "response_schema", None
        ):
            self.tokenizer = add_response_schema(self.tokenizer)  # what TRL sets to parse tool calls
        prefix_safe = is_chat_template_prefix_preserving(self.tokenizer)
        self.chat_template = None if prefix_safe else get_training_chat_template(self.tokenizer)
        self.policy = policy
        self.loop = loop or BackgroundLoop.shared()
        self.tools = tool_schemas()
        self._hermes = "<tool_call>" in str(self.tokenizer.chat_template or "")
        self._prefixes: dict[str, list[int]] = {}  # per tool name: the dummy conversation a tool answer follows

    def __call__(self, prompts: list[list[dict[str, Any]]], trainer: Any) -> dict[str, Any]:
        policy = self.policy or TrainerPolicy(trainer)
        args = getattr(trainer, "args", None)
        budget = getattr(args, "max_completion_length", None) or 256
        max_calls = getattr(args, "max_tool_calling_iterations", None) or 10**6
        rows = [row_of(p) for p in prompts]
        episodes = self._open(rows)
        samples = [sample for episode in episodes for sample in episode]
        try:
            for sample in samples:
                sample.pending = self.loop.submit(sample.session.start())
            while any(sample.live for sample in samples):
                ready = self._settle(episodes, budget)
                if not ready:
                    continue
                new_ids, new_logprobs = policy.generate([s.prompt_ids + s.completion for s in ready])
                logprobs = new_logprobs or [[0.0] * len(ids) for ids in new_ids]
                for sample, ids, lps in zip(ready, new_ids, logprobs, strict=True):
                    self._take_turn(sample, list(ids), list(lps), budget, max_calls)
            outputs = sorted((s for s in samples if s.index is not None), key=lambda s: s.index or 0)
            endings = [s.ending or self.loop.submit(s.session.finish()) for s in outputs]
            rewards = [self._rated(s, ending.result()) for s, ending in zip(outputs, endings, strict=True)]
        finally:
            for sample in samples:
                sample.session.close()  # only an episode a failure left unfinished
        return {
            "prompt_ids": [s.prompt_ids for s in outputs],
            "completion_ids": [s.completion for s in outputs],
            "logprobs": [s.logprobs for s in outputs],
            "env_mask": [s.mask for s in outputs],
            REWARD_FIELD: rewards,
        }

    def _open(self, rows: list[SeatRow]) -> list[list[_Sample]]:
        """The batch's episodes, each a list of samples (one per driven seat). A row without a ``SELF`` partner is
        one sample in its own episode. Self-play rows are paired: the k-th prompt of each seat of the same start
        (the same row but for its seat) share the k-th episode, each a sample of its own seat; a driven seat no
        prompt of the batch asks for is played by the policy too, as a shadow sample that is not returned."""
        episodes: list[list[_Sample]] = []
        waiting: dict[str, list[dict[int, int]]] = {}  # start -> per episode: seat -> the prompt's index
        for index, row in enumerate(rows):
            if SELF not in row.partners:
                episodes.append([_Sample(self.maker.open(row), index=index)])
                continue
            # rows of one start: equal but for their seat, each seat played by the same spec (one partner spec
            # covers every other seat; a list names each seat's, so the row's own seat is put in as SELF)
            seats = [SELF] if len(row.partners) == 1 else row.seat_specs(len(row.partners) + 1)
            start = json.dumps([row.model_dump(exclude={"seat", "partners"}), seats], sort_keys=True)
            slots = waiting.setdefault(start, [])
            free = next((slot for slot in slots if row.seat not in slot), None)
            if free is None:
                slots.append(free := {})
            free[row.seat] = index
        for slots in waiting.values():
            for slot in slots:
                first = rows[min(slot.values())]
                sessions = self.maker.open_together(first)
                episodes.append([_Sample(s, index=slot.get(s.seat)) for s in sessions])
                if unknown := set(slot) - {s.seat for s in sessions}:
                    raise ValueError(f"row {first.scenario!r}: seats {sorted(unknown)} are not driven in its episode")
        return episodes

    def _settle(self, episodes: list[list[_Sample]], budget: int) -> list[_Sample]:
        """Wait until every episode still played has a turn for one of its live samples (the others wait for that
        seat's move), take those turns in, and return the samples that are to move now."""
        for episode in episodes:
            pending = [s.pending for s in episode if s.live and s.pending is not None]
            if pending:
                concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
        ready = []
        for sample in (s for episode in episodes for s in episode):
            if sample.live and sample.pending is not None and sample.pending.done():
                turn, sample.pending = sample.pending.result(), None
                self._take_answer(sample, turn, budget)
                if sample.live:
                    ready.append(sample)
                else:
                    self._end(sample)
        return ready

    def _take_answer(self, sample: _Sample, turn: SeatTurn, budget: int) -> None:
        """The seat's observation after its last move (its first: the prompt; later: the tool's answer), within
        the budget (out of budget: the answer is dropped, as TRL drops it, and the sample ends)."""
        if not sample.prompt_ids:
            sample.prompt_ids = self._render(turn.messages, add_generation_prompt=True)
        else:
            suffix = self._suffix(sample.last_tool, turn.update)
            if len(sample.completion) + len(suffix) > budget:
                sample.live = False
                return
            sample.completion += suffix
            sample.logprobs += [0.0] * len(suffix)
            sample.mask += [0] * len(suffix)
        sample.live = not turn.done

    def _take_turn(self, sample: _Sample, ids: list[int], logprobs: list[float], budget: int, max_calls: int) -> None:
        """The policy's turn: its tokens within the budget, then its tool call as the seat's move (started on the
        loop, taken in by ``_settle``); no call, or no call left: the sample ends."""
        kept = ids[: budget - len(sample.completion)]
        sample.completion += kept
        sample.logprobs += logprobs[: len(kept)]
        sample.mask += [1] * len(kept)
        call = self._tool_call(kept, sample.prompt_ids) if len(kept) == len(ids) else None
        if call is None or sample.calls >= max_calls:
            sample.live = False
            self._end(sample)
            return
        sample.calls += 1
        sample.last_tool = call["name"]
        sample.pending = self.loop.submit(self._move(sample, call))

    def _end(self, sample: _Sample) -> None:
        """A sample that stops moving: its episode is finished now (its pending move fails), so the seats it
        shares the episode with are not kept waiting, and it is rated with the rest."""
        if sample.ending is None:
            sample.ending = self.loop.submit(sample.session.finish())

    def _rated(self, sample: _Sample, log: Any) -> float | None:
        reward = sample.session.reward
        if self.on_episode is not None:
            self.on_episode(log, reward)
        return reward

    # Each sample's start and moves run on the background loop, so one sample's work there overlaps the other
    # samples' partner and judge calls in flight.

    async def _move(self, sample: _Sample, call: dict[str, Any]) -> SeatTurn:
        kind, text = ACTION_OF_TOOL[call["name"]]
        arguments = call.get("arguments") or {}
        action = {"action_type": kind.value, "argument": str(arguments.get(text, ""))}
        if arguments.get("to") is not None:
            action["to"] = arguments["to"]
        return await sample.session.step(action)

    def _tool_call(self, ids: list[int], prefix: list[int]) -> dict[str, Any] | None:
        """The first call of a known tool in a turn, or None (no call: the rollout ends). Hermes-style templates
        (``<tool_call>{json}</tool_call>``, TRL's ``qwen2_5.jinja``) are read directly, others with TRL's parser."""
        if self._hermes:
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            calls = []
            for body in HERMES_CALL.findall(text):
                try:
                    calls.append({"function": json.loads(body)})
                except ValueError:
                    continue
        else:
            from trl.chat_template_utils import parse_response

            calls = parse_response(self.tokenizer, ids, prefix=prefix, tools=self.tools).get("tool_calls") or []
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and function.get("name") in ACTION_OF_TOOL:
                if isinstance(function.get("arguments"), dict):
                    return function
        return None

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool, tools: bool = True) -> list[int]:
        return list(
            self.tokenizer.apply_chat_template(
                messages, tools=self.tools if tools else None, tokenize=True,
                add_generation_prompt=add_generation_prompt, chat_template=self.chat_template, return_dict=False,
            )
        )  # fmt: skip

    def _suffix(self, name: str, answer: str) -> list[int]:
        """The tokens a tool's answer adds after the policy's turn, rendered as TRL's ``_get_tool_suffix_ids``
        renders them (after a dummy conversation without tools, cut after its last end-of-turn token)."""
        call = {"type": "function", "function": {"name": name, "arguments": {}}}
        dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
        if name not in self._prefixes:
            prefix = self._render(dummy, add_generation_prompt=False, tools=False)
            ends = [i for i, t in enumerate(prefix) if t == self.tokenizer.eos_token_id]
            self._prefixes[name] = prefix[: ends[-1] + 1] if ends else prefix
        prefix = self._prefixes[name]
        tool = {"role": "tool", "name": name, "content": answer}
        full = self._render([*dummy, tool], add_generation_prompt=True, tools=False)
        if full[: len(prefix)] != prefix:
            raise ValueError("the chat template does not render a tool answer as a suffix of the conversation")
        return full[len(prefix) :]


def episode_rollouts(
    maker: SessionMaker,
    tokenizer: Any,
    policy: Policy | None = None,
    on_episode: EpisodeCallback | None = None,
) -> EpisodeRollouts:
    """``rollout_func`` for ``GRPOTrainer`` (pass ``reward_funcs=[episode_reward]`` with it); ``policy`` None: the
    trainer's own generation (``TrainerPolicy``)."""
    return EpisodeRollouts(maker, tokenizer, policy, on_episode)


__all__ = [
    "EpisodeRollouts",
    "Policy",
    "ScriptedToolPolicy",
    "TrainerPolicy",
    "episode_reward",
    "episode_rollouts",
    "rollout_dataset",
    "row_of",
    "speak_call",
]
