"""Our worlds as a verl agent loop: ``SocialAgentLoop``, registered as ``sotopia_agent`` (``pip install
'sotopia-env[verl]'``; verl >= 0.9). Importing this module registers it; name it in verl's
``actor_rollout_ref.rollout.agent.agent_loop_config_path`` file, and give each dataset row ``agent_name:
sotopia_agent`` and the seat's ``SeatRow`` fields in ``extra_info`` (``verl_records`` builds both).

The file's entry may carry the loop's own keys (``LoopConfig``), which verl passes to the loop on every Ray worker:
``api_base`` (the model servers of LLM partners and judges), ``prompt`` (the prompt family the seat is rendered
in), ``scenarios_dir`` (folders of scenario YAML besides the built-in ones), ``scenarios`` (a selector: a row
outside it is refused), ``partner`` (replaces every row's partners) and ``judge`` (replaces the LLM judge of rows
that are not judged exactly). An unknown key is refused by name.

One rollout is one episode (``training.seat_session``): the policy plays its seat through the same tools as in
TRL (``training.trl_env``: speak, non_verbal, physical_action, leave), parsed by verl's tool parser
(``multi_turn.format``, ``hermes`` for ChatML models). Each tool call is one move; the partners then play up to the
seat's next move, and their moves come back as the tool's answer.

- The opening must fit verl's ``rollout.prompt_length`` (512 by default), which verl would left-truncate with only
  a warning, cutting the scenario and the goal: the loop refuses such a row before the first generation, naming
  both numbers and the setting (``PromptTooLong``). ``opening_lengths`` measures the openings to size it.
- ``response_ids`` hold every turn: the policy's tokens (``response_mask`` 1, with the log-probs the server
  returned) and the answers (``response_mask`` 0), built with verl's Continuous Token builder, so the ids the
  policy sampled are the ids trained.
- ``reward_score`` is the judge's goal score for the seat. An episode the judge could not rate trains nothing:
  its ``response_mask`` is all 0 and ``extra_fields["rated"]`` is False (verl has no unscorable sample: its
  placeholder 0.0 still enters the group's mean, so filter on ``rated`` in a custom advantage if that matters).
- ``metrics`` (verl's ``AgentLoopMetrics``, in seconds, summed over the episode): ``generate_sequences`` the
  server's generations, ``tool_calls`` the environment's moves (the episode's start and every tool call: the
  partners' turns), ``compute_score`` the rest of the episode after the policy's last move and the judge's
  rating; ``num_preempted`` as the server reports it (-1: not reported).
- ``num_turns`` follows verl's ``ToolAgentLoop``: the opening user message, plus each policy generation, plus each
  round of tool answers (the system message is not a turn).
"""

from __future__ import annotations

import json
from typing import Any
from uuid import uuid4

from omegaconf import DictConfig, ListConfig, OmegaConf
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.utils.profiler import simple_timer
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

from sotopia_env.errors import UserError
from sotopia_env.evaluators import VERIFIABLE
from sotopia_env.library import load_library
from sotopia_env.prompt import SOTOPIA, prompt_function
from sotopia_env.training.seat_rows import SeatRow, SessionMaker
from sotopia_env.training.seat_session import BackgroundLoop, SeatSession, SeatTurn
from sotopia_env.training.trl_env import TOOL_OF, tool_schemas

AGENT_NAME = "sotopia_agent"
ACTION_OF = {name: (kind, text) for kind, (name, text) in TOOL_OF.items()}
PROMPT_LENGTH = "actor_rollout_ref.rollout.prompt_length"  # verl's setting; it defaults to data.max_prompt_length


class LoopConfigError(UserError, ValueError):
    """A bad key or value in the loop's entry of verl's agent-loop YAML; the message names it."""


class PromptTooLong(UserError, ValueError):
    """An opening longer than verl's ``rollout.prompt_length`` (verl would cut its start off)."""


class LoopConfig(BaseModel):
    """The loop's own keys in its entry of verl's agent-loop YAML (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api_base: tuple[str, ...] = ()  # a URL, a comma list or a list of them
    prompt: str = SOTOPIA
    scenarios_dir: tuple[str, ...] = ()
    scenarios: str | None = None
    partner: str | None = None
    judge: str | None = None

    @field_validator("api_base", "scenarios_dir", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else () if value is None else value

    @field_validator("prompt")
    @classmethod
    def _known_prompt(cls, value: str) -> str:
        prompt_function(value)  # an unknown name: ValueError, with the known ones
        return value

    @classmethod
    def parse(cls, entry: dict[str, Any]) -> LoopConfig:
        """The keys hydra passed from the YAML entry (OmegaConf values are turned into plain ones)."""
        plain = {
            k: OmegaConf.to_container(v) if isinstance(v, (DictConfig, ListConfig)) else v for k, v in entry.items()
        }
        try:
            return cls.model_validate(plain)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"]) or "entry"
            known = ", ".join(cls.model_fields)
            why = error["msg"].removeprefix("Value error, ")
            why = f"unknown key (the loop's keys: {known})" if error["type"] == "extra_forbidden" else why
            raise LoopConfigError(f"verl agent loop {AGENT_NAME!r}, key {where!r}: {why}") from None


class LoopSetup:
    """What one ``LoopConfig`` opens sessions with: a ``SessionMaker`` and the scenario ids rows may name."""

    def __init__(self, config: LoopConfig) -> None:
        self.config = config
        library = _checked("scenarios_dir", lambda: load_library(config.scenarios_dir))
        self.maker = _checked("api_base", lambda: SessionMaker(library, list(config.api_base) or None, config.prompt))
        selected = _checked("scenarios", lambda: library.select(config.scenarios) if config.scenarios else None)
        self.allowed = {s.id for s in selected} if selected is not None else None

    def row(self, extra_info: dict[str, Any]) -> SeatRow:
        """The dataset row as this config plays it: its partners and LLM judge replaced where the config says."""
        row = SeatRow.model_validate(extra_info)
        if self.allowed is not None and row.scenario not in self.allowed:
            raise LoopConfigError(
                f"row {row.scenario!r} is not among the loop's scenarios {self.config.scenarios!r} (its 'scenarios')"
            )
        update: dict[str, Any] = {}
        if self.config.partner:
            update["partners"] = [self.config.partner]
        if self.config.judge and row.evaluator != VERIFIABLE:
            update["evaluator"] = self.config.judge
        return row.model_copy(update=update)


def _checked(key: str, make: Any) -> Any:
    """``make()``, or a ``LoopConfigError`` naming ``key`` for the user error it raised."""
    try:
        return make()
    except (UserError, ValueError) as exc:
        raise LoopConfigError(f"verl agent loop {AGENT_NAME!r}, key {key!r}: {exc}") from None


_SETUPS: dict[LoopConfig, LoopSetup] = {}


def loop_setup(config: LoopConfig | None = None) -> LoopSetup:
    """The process's setup for ``config`` (verl builds an agent loop per rollout; library and judges are shared)."""
    config = config or LoopConfig()
    if config not in _SETUPS:
        _SETUPS[config] = LoopSetup(config)
    return _SETUPS[config]


def session_maker(config: LoopConfig | None = None) -> SessionMaker:
    """The process's one ``SessionMaker`` for ``config`` (the default config when None)."""
    return loop_setup(config).maker


def check_opening(length: int, prompt_length: int, row: SeatRow) -> None:
    """Refuse an opening of ``length`` tokens that does not fit ``prompt_length``, in one line."""
    if length > prompt_length:
        raise PromptTooLong(
            f"the opening of {row.scenario!r} (seat {row.seat + 1}, seed {row.seed}) is {length} tokens, more than "
            f"verl's rollout.prompt_length={prompt_length}, which would cut its start off: set {PROMPT_LENGTH} (or "
            f"data.max_prompt_length) to at least {length}"
        )


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

    def __init__(
        self,
        trainer_config: Any,
        server_manager: Any,
        tokenizer: Any,
        processor: Any,
        dataset_cls: Any,
        data_config: Any,
        hf_model_type: str | None = None,
        tools: Any = None,  # verl's own tool list: ours are the seat's actions
        name: str | None = None,  # the YAML entry's name, which hydra passes on
        **options: Any,
    ) -> None:
        super().__init__(
            trainer_config=trainer_config,
            server_manager=server_manager,
            tokenizer=tokenizer,
            processor=processor,
            dataset_cls=dataset_cls,
            data_config=data_config,
            hf_model_type=hf_model_type,
        )
        self.setup = loop_setup(LoopConfig.parse(options))
        multi_turn = self.rollout_config.multi_turn
        self.tool_parser = ToolParser.get_tool_parser(multi_turn.format, self.tokenizer)
        self.max_assistant_turns = multi_turn.max_assistant_turns
        self.prompt_length = self.rollout_config.prompt_length
        self.response_length = self.rollout_config.response_length
        self.tools = tool_schemas()

    def _cap_text_prompt_length(self, prompt_ids: list[int]) -> list[int]:
        return prompt_ids  # verl would left-truncate a long opening; ``run`` refuses it instead

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        row = self.setup.row(kwargs["extra_info"])
        session = self.setup.maker.open(row)
        timing: dict[str, float] = {}
        with simple_timer("tool_calls", timing):
            turn = await session.start()
        messages: list[dict[str, Any]] = list(turn.messages)
        try:
            prompt_ids = await self.ct_build_initial_tokens(messages, tools=self.tools)
            check_opening(len(prompt_ids), self.prompt_length, row)
        except BaseException:
            session.close()
            raise
        ids, mask, logprobs = list(prompt_ids), [], []
        request_id, generations, answers, preempted = uuid4().hex, 0, 0, []
        if self.tool_parser.stop_token_ids:
            stops = sorted({*(sampling_params.get("stop_token_ids") or []), *self.tool_parser.stop_token_ids})
            sampling_params = {**sampling_params, "stop_token_ids": stops}
        while not turn.done and len(mask) < self.response_length:
            if self.max_assistant_turns and generations >= self.max_assistant_turns:
                break
            with simple_timer("generate_sequences", timing):
                out = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=ids, sampling_params=sampling_params
                )
            generations += 1
            if getattr(out, "num_preempted", None) is not None:
                preempted.append(out.num_preempted)
            merged, mask, new_logprobs = await self.ct_merge_assistant_token(
                ids, out.token_ids, mask, logprobs if logprobs or out.log_probs else None, out.log_probs or None
            )
            ids, logprobs = merged.token_ids, new_logprobs or []
            content, calls = await self.tool_parser.extract_tool_calls(out.token_ids, None)
            messages.append(self._assistant_message(content, calls))
            if not calls:
                break
            before = list(messages)
            with simple_timer("tool_calls", timing):
                for call in calls:
                    answer = await play_call(session, call)
                    turn = answer if isinstance(answer, SeatTurn) else turn
                    update = answer.update if isinstance(answer, SeatTurn) else answer
                    messages.append({"role": "tool", "content": update})
            answers += 1
            merged, mask, new_logprobs = await self.ct_merge_context_msg(
                before, messages, ids, mask, logprobs or None, tools=self.tools
            )
            ids, logprobs = merged.token_ids, new_logprobs or []
        with simple_timer("compute_score", timing):
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
            num_turns=1 + generations + answers,  # verl's ToolAgentLoop: user + assistant turns, the opening's too
            metrics=AgentLoopMetrics(**timing, num_preempted=sum(preempted) if preempted else -1),
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


def opening_lengths(
    rows: list[SeatRow], tokenizer: Any, maker: SessionMaker | None = None, hf_model_type: str | None = None
) -> list[int]:
    """Each row's opening in tokens, as the loop builds it (verl's Continuous Token builder, our tools): the
    ``rollout.prompt_length`` it needs. Partners that are not rule agents pass here (no model is called), so a
    partner that speaks first adds its first line on top."""
    maker = maker or session_maker()
    builder = create_continuous_token_builder(tokenizer, hf_model_type=hf_model_type)
    lengths = []
    for row in rows:
        session = maker.open(row, stand_ins=True)
        turn = BackgroundLoop.shared().run(session.start())
        session.close()
        lengths.append(len(builder.build_initial_tokens(turn.messages, tools=tool_schemas())))
    return lengths


def verl_records(
    rows: list[SeatRow], data_source: str = "sotopia_env", maker: SessionMaker | None = None
) -> list[dict[str, Any]]:
    """Dataset records for verl's ``RLHFDataset`` (write them to parquet): ``prompt`` (the seat's system message; the
    opening itself comes from the episode), ``agent_name``, ``extra_info`` (the row) and ``data_source``."""
    maker = maker or session_maker()
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
