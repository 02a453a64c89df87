"""Our worlds as a verl agent loop: ``SocialAgentLoop``, registered as ``sotopia_agent`` (``pip install
'sotopia-env[verl]'``; verl >= 0.9). Importing this module registers it; name the module in verl's
``actor_rollout_ref.rollout.agent.agent_loop_config_path`` file (``name: sotopia_agent``,
``_target_: sotopia_env.training.verl_loop.SocialAgentLoop``), and give each dataset row ``agent_name:
sotopia_agent`` and the seat's ``SeatRow`` fields in ``extra_info`` (``verl_records`` builds both).

One rollout is one episode (``training.seat_session``): the policy plays its seat through the same tools as in
TRL (``training.trl_env``: speak, non_verbal, physical_action, leave), parsed by verl's tool parser
(``multi_turn.format``, ``hermes`` for ChatML models). Each tool call is one move; the partners then play up to the
seat's next move, and their moves come back as the tool's answer.

- ``response_ids`` hold every turn: the policy's tokens (``response_mask`` 1, with the log-probs the server
  returned) and the answers (``response_mask`` 0), built with verl's Continuous Token builder, so the ids the
  policy sampled are the ids trained.
- ``reward_score`` is the judge's goal score for the seat. An episode the judge could not rate trains nothing:
  its ``response_mask`` is all 0 and ``extra_fields["rated"]`` is False (verl has no unscorable sample: its
  placeholder 0.0 still enters the group's mean, so filter on ``rated`` in a custom advantage if that matters).
"""

from __future__ import annotations

import json
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser

from sotopia_env.training.seat_rows import SeatRow, SessionMaker
from sotopia_env.training.seat_session import SeatSession, SeatTurn
from sotopia_env.training.trl_env import TOOL_OF, tool_schemas

AGENT_NAME = "sotopia_agent"
ACTION_OF = {name: (kind, text) for kind, (name, text) in TOOL_OF.items()}
_MAKER: SessionMaker | None = None


def session_maker() -> SessionMaker:
    """The process's one ``SessionMaker`` (verl builds an agent loop per rollout; the judges' backends are shared)."""
    global _MAKER
    if _MAKER is None:
        _MAKER = SessionMaker()
    return _MAKER


async def play_call(session: SeatSession, call: FunctionCall) -> SeatTurn | str:
    """One tool call as the seat's move: the turn it led to, or why it is no move (unknown tool, bad arguments)."""
    if call.name not in ACTION_OF:
        return f"Your move was not accepted: there is no tool {call.name!r} (tools: {', '.join(ACTION_OF)})."
    kind, text = ACTION_OF[call.name]
    try:
        arguments = json.loads(call.arguments) if call.arguments else {}
    except json.JSONDecodeError as exc:
        return f"Your move was not accepted: its arguments are not JSON ({exc.msg})."
    if not isinstance(arguments, dict) or set(arguments) - {text, "to"}:
        return f"Your move was not accepted: {call.name} takes {text!r} and 'to', not {arguments!r}."
    action: dict[str, Any] = {"action_type": kind.value, "argument": str(arguments.get(text, ""))}
    if arguments.get("to") is not None:
        action["to"] = arguments["to"]
    return await session.step(action)


@register(AGENT_NAME)
class SocialAgentLoop(AgentLoopBase):
    """A multi-turn verl agent loop over one seat of one episode; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("tools", None)  # verl's own tool list: ours are the seat's actions
        super().__init__(*args, **kwargs)
        multi_turn = self.rollout_config.multi_turn
        self.tool_parser = ToolParser.get_tool_parser(multi_turn.format, self.tokenizer)
        self.max_assistant_turns = multi_turn.max_assistant_turns
        self.response_length = self.rollout_config.response_length
        self.tools = tool_schemas()

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        row = SeatRow.model_validate(kwargs["extra_info"])
        session = session_maker().open(row)
        turn = await session.start()
        messages: list[dict[str, Any]] = list(turn.messages)
        prompt_ids = await self.ct_build_initial_tokens(messages, tools=self.tools)
        ids, mask, logprobs = list(prompt_ids), [], []
        request_id, turns = uuid4().hex, 0
        if self.tool_parser.stop_token_ids:
            stops = sorted({*(sampling_params.get("stop_token_ids") or []), *self.tool_parser.stop_token_ids})
            sampling_params = {**sampling_params, "stop_token_ids": stops}
        while not turn.done and len(mask) < self.response_length:
            if self.max_assistant_turns and turns >= self.max_assistant_turns:
                break
            out = await self.server_manager.generate(
                request_id=request_id, prompt_ids=ids, sampling_params=sampling_params
            )
            turns += 1
            merged, mask, new_logprobs = await self.ct_merge_assistant_token(
                ids, out.token_ids, mask, logprobs if logprobs or out.log_probs else None, out.log_probs or None
            )
            ids, logprobs = merged.token_ids, new_logprobs or []
            content, calls = await self.tool_parser.extract_tool_calls(out.token_ids, None)
            messages.append(self._assistant_message(content, calls))
            if not calls:
                break
            before = list(messages)
            for call in calls:
                answer = await play_call(session, call)
                turn = answer if isinstance(answer, SeatTurn) else turn
                messages.append({"role": "tool", "content": answer.update if isinstance(answer, SeatTurn) else answer})
            merged, mask, new_logprobs = await self.ct_merge_context_msg(
                before, messages, ids, mask, logprobs or None, tools=self.tools
            )
            ids, logprobs = merged.token_ids, new_logprobs or []
        await session.finish()
        reward = session.reward
        response = ids[len(prompt_ids) :][: self.response_length]
        mask = mask[: self.response_length] if reward is not None else [0] * len(response)
        return AgentLoopOutput(
            prompt_ids=list(prompt_ids),
            response_ids=response,
            response_mask=mask,
            response_logprobs=logprobs[: self.response_length] if logprobs else None,
            reward_score=reward if reward is not None else 0.0,
            num_turns=len(messages),
            metrics=AgentLoopMetrics(),
            extra_fields={
                "rated": reward is not None,
                "termination_reason": session.turn and session.turn.termination_reason,
            },
        )

    @staticmethod
    def _assistant_message(content: str, calls: list[FunctionCall]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content if not calls else ""}
        if calls:
            message["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": _arguments(c.arguments)}} for c in calls
            ]
        return message


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def verl_records(rows: list[SeatRow], data_source: str = "sotopia_env") -> list[dict[str, Any]]:
    """Dataset records for verl's ``RLHFDataset`` (write them to parquet): ``prompt`` (the seat's system message; the
    opening itself comes from the episode), ``agent_name``, ``extra_info`` (the row) and ``data_source``."""
    maker = session_maker()
    return [
        {
            "data_source": data_source,
            "prompt": [{"role": "system", "content": maker.opening_system(row)}],
            "agent_name": AGENT_NAME,
            "extra_info": row.model_dump(),
            "reward_model": {"style": "rule", "ground_truth": ""},
        }
        for row in rows
    ]
