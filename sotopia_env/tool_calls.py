"""The ``tools`` policy format: a seat's moves as tool calls, from TRL training to ``benchmark`` and the leaderboard.

A policy trained through TRL (``training.trl_env.SocialToolEnv``, ``training.trl_rollouts``) does not write our JSON
actions: it calls the seat's tools (``<tool_call>{"name": "speak", "arguments": {"words": ...}}</tool_call>`` in
Hermes/ChatML templates such as TRL's ``qwen2_5.jinja``). This module is what both sides share, so what such a model
is trained on is what it sees when ``LLMAgent`` plays it (``prompt: tools`` in its ``sotopia_model.json``):

- ``SeatTools``: the tools themselves (their names, arguments and docstrings are their JSON schemas: TRL reads them
  off the environment's methods with ``transformers.utils.get_json_schema``, and ``tool_schemas`` does the same);
  ``SocialToolEnv`` is a ``SeatTools``.
- ``sotopia_env.prompt.tools_prompt(observation)``: the conversation the TRL environment shows the seat, rebuilt from
  one observation: the seat's opening prompt (SOTOPIA's, ``training.seat_rows.SessionMaker``'s default, as at its
  first move), then per move of its own the tool call and the tool's answer (the lines new to it since that move, and
  whose move it is: ``SeatSession``'s ``update``). A game's earlier phases are rendered with the current choices.
- ``tool_call_message`` / ``tool_call_text``: an action as the assistant's tool call (a message; its Hermes text).
- ``tool_call_schema``: the JSON schema of a valid call in one observation (the tools its available moves take, the
  arguments ``action_json_schema`` allows them), which the local backend constrains a reply to (``ChatRequest``'s
  ``call_schema``), written as its chat template writes a call (``backends.tool_wire.call_format``).
- ``parse_tool_call``: a reply (its text, or a server's ``tool_calls``) back to an ``AgentAction``; ``InvalidAction``
  (one line) for no call, a malformed one, an unknown tool or wrong arguments, which ``LLMAgent`` retries and then
  counts as an agent error, as it does invalid JSON.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from sotopia_env.actions import ActionType, AgentAction, InvalidAction, action_json_schema
from sotopia_env.backends.tool_wire import openai_messages, tool_template  # noqa: F401  (re-exported)

TOOLS = "tools"  # the prompt's name in ``sotopia_env.prompt.PROMPTS``
TOOL_OF = {  # action type -> the tool that takes it, and the name of its text argument
    ActionType.speak: ("speak", "words"),
    ActionType.non_verbal: ("non_verbal", "description"),
    ActionType.action: ("physical_action", "description"),
    ActionType.leave: ("leave", "words"),
}
ACTION_OF_TOOL = {name: (kind, text) for kind, (name, text) in TOOL_OF.items()}
HERMES_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


class SeatTools:
    """The seat's moves as tools: each method is one tool (its docstring is its schema); ``_move`` makes the move."""

    def _move(self, kind: ActionType, argument: str, to: list[str] | None) -> str:
        raise NotImplementedError

    def speak(self, words: str, to: list[str] | None = None) -> str:
        """Say something.

        Args:
            words: What you say.
            to: Only those who should hear it (when three or more are present); omit it for everyone.

        Returns:
            What happens next.
        """
        return self._move(ActionType.speak, words, to)

    def non_verbal(self, description: str, to: list[str] | None = None) -> str:
        """Make a gesture or facial expression.

        Args:
            description: What you do.
            to: Only those who should see it (when three or more are present); omit it for everyone.

        Returns:
            What happens next.
        """
        return self._move(ActionType.non_verbal, description, to)

    def physical_action(self, description: str, to: list[str] | None = None) -> str:
        """Do something physical; in a game's vote or night phase, make one of the listed choices.

        Args:
            description: What you do, or the choice.
            to: Only those who should see it (when three or more are present); omit it for everyone.

        Returns:
            What happens next.
        """
        return self._move(ActionType.action, description, to)

    def leave(self, words: str = "") -> str:
        """Leave the conversation, once your goal is reached or hopeless.

        Args:
            words: What you say as you go.

        Returns:
            What happens next.
        """
        return self._move(ActionType.leave, words, None)


@cache
def _schemas() -> str:
    from transformers.utils import get_json_schema

    return json.dumps([get_json_schema(getattr(SeatTools, name)) for name, _ in TOOL_OF.values()])


def tool_schemas() -> list[dict[str, Any]]:
    """The JSON schemas of the seat's tools (``{"type": "function", "function": ...}``), as TRL renders them into the
    prompt and as an OpenAI-compatible server takes them (``tools``); a fresh copy each call."""
    return json.loads(_schemas())


def tool_call_message(action: AgentAction) -> dict[str, Any] | None:
    """The assistant message that makes ``action`` through the tools (None for ``none``: no tool takes it)."""
    if action.action_type not in TOOL_OF:
        return None
    name, text = TOOL_OF[action.action_type]
    arguments: dict[str, Any] = {text: action.argument}
    if action.to is not None:
        arguments["to"] = list(action.to)
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def tool_call_text(action: AgentAction) -> str:
    """``action``'s tool call as Hermes/ChatML templates (TRL's ``qwen2_5.jinja``) render it: what the model writes."""
    message = tool_call_message(action)
    if message is None:
        raise InvalidAction(f"a {action.action_type.value!r} move has no tool")
    function = message["tool_calls"][0]["function"]
    body = json.dumps({"name": function["name"], "arguments": function["arguments"]})
    return f"<tool_call>\n{body}\n</tool_call>"


def tool_call_schema(
    allowed: list[str] | None = None, recipients: list[str] | None = None, choices: list[str] | None = None
) -> dict[str, Any] | None:
    """The JSON schema of one valid tool call (``{"name": ..., "arguments": {...}}``, in that order) where the moves
    ``allowed`` are available: an ``anyOf`` of one branch per tool that takes one of them, whose arguments follow
    ``action_json_schema(allowed, recipients, choices)``: worded moves carry words, a game's choice is one of
    ``choices``, ``to`` (optional; not on ``leave``) names only ``recipients``. None when no allowed move has a
    tool (``none`` alone). ``parse_tool_call`` reads every call this schema admits as an allowed move."""
    action = action_json_schema(allowed, recipients, choices)
    branches = []
    for group in action.get("anyOf", [action]):
        properties = group["properties"]
        for kind in properties["action_type"]["enum"]:
            if ActionType(kind) not in TOOL_OF:
                continue
            name, text = TOOL_OF[ActionType(kind)]
            arguments = {text: properties["argument"]}
            if "to" in properties and kind != ActionType.leave.value:
                arguments["to"] = properties["to"]
            branches.append((name, arguments))
    order = [name for name, _ in TOOL_OF.values()]
    branches.sort(key=lambda branch: order.index(branch[0]))
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "const": name},
                "arguments": {
                    "type": "object",
                    "properties": arguments,
                    "required": [next(iter(arguments))],
                    "additionalProperties": False,
                },
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for name, arguments in branches
    ]
    if not calls:
        return None
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


def parse_tool_call(text: str, tool_calls: list[dict[str, Any]] | None = None) -> AgentAction:
    """The move of a reply: its first tool call (a server's parsed ``tool_calls`` first, else the Hermes
    ``<tool_call>{json}</tool_call>`` blocks of ``text``, read as ``training.trl_rollouts`` reads them). The call
    must name one of the seat's tools with the arguments TRL would call it with; ``InvalidAction`` otherwise."""
    calls: list[Any] = list(tool_calls or [])
    for body in HERMES_CALL.findall(text or ""):
        try:
            calls.append(json.loads(body))
        except ValueError:
            raise InvalidAction(f"a tool call that is not JSON: {body[:80]!r}") from None
    if not calls:
        raise InvalidAction(f"no tool call in the reply: {(text or '')[:80]!r}")
    call = calls[0]
    function = call.get("function", call) if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if name not in ACTION_OF_TOOL:
        raise InvalidAction(f"unknown tool {name!r} (tools: {', '.join(ACTION_OF_TOOL)})")
    assert isinstance(function, dict)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):  # OpenAI's wire format: the arguments as a JSON string
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            raise InvalidAction(f"tool {name!r}: arguments that are not JSON: {arguments[:80]!r}") from None
    if not isinstance(arguments, dict):
        raise InvalidAction(f"tool {name!r}: arguments must be an object, not {arguments!r}")
    kind, field = ACTION_OF_TOOL[name]
    allowed = {field} | ({"to"} if kind is not ActionType.leave else set())
    if extra := sorted(set(arguments) - allowed):
        raise InvalidAction(f"tool {name!r} takes no argument {', '.join(map(repr, extra))}")
    argument = arguments.get(field, "" if kind is ActionType.leave else None)
    if not isinstance(argument, str):
        raise InvalidAction(f"tool {name!r}: {field!r} must be a string, not {argument!r}")
    to = arguments.get("to")
    if to is not None and not (isinstance(to, list) and all(isinstance(t, str) for t in to)):
        raise InvalidAction(f"tool {name!r}: 'to' must be a list of names, not {to!r}")
    try:
        return AgentAction(action_type=kind, argument=argument, to=to)
    except ValueError as exc:  # pydantic's ValidationError: a recipient that is no name
        raise InvalidAction(f"tool {name!r}: {str(exc).splitlines()[-1].strip()}") from None
