"""Agent actions: what an agent can do on its turn, and how text becomes one."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_serializer

from sotopia_env.validation import field_problem


class ActionType(str, Enum):
    none = "none"
    speak = "speak"
    non_verbal = "non-verbal communication"
    action = "action"
    leave = "leave"


ACTION_TYPES: tuple[str, ...] = tuple(a.value for a in ActionType)


class AgentAction(BaseModel):
    """One agent's move. ``error`` is set only by an agent that failed to act.

    ``to`` addresses the move to some of the others (by name, or by the label its author knows them by); only
    they, the author and the judge observe it. ``None`` means everyone present. The env checks it: a ``to``
    that is empty or names someone absent is an invalid action.
    """

    model_config = ConfigDict(extra="forbid")

    action_type: ActionType
    argument: str = ""
    to: list[str] | None = None
    error: str | None = None  # stored with the episode; never part of the action JSON a model sees

    @field_validator("to")
    @classmethod
    def _recipients(cls, to: list[str] | None) -> list[str] | None:
        if to is not None and any(not isinstance(n, str) or not n.strip() for n in to):
            raise ValueError("to: every recipient must be a non-empty name")
        return to

    @model_serializer(mode="wrap")
    def _omit_unaddressed(self, handler: Any) -> dict[str, Any]:
        data = handler(self)  # a public move stores as it did before ``to`` existed
        if data.get("to") is None:
            data.pop("to", None)
        return data

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"action_type": self.action_type.value, "argument": self.argument}
        if self.to is not None:
            data["to"] = list(self.to)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def failed(cls, error: str) -> AgentAction:
        """The ``none`` action an agent takes when it could not produce one."""
        return cls(action_type=ActionType.none, argument="", error=error)


MAX_ARGUMENT_CHARS = 600
# Speech, gestures and physical actions need words: the argument opens with a character that is not
# whitespace, punctuation or a control character (so never "", "..." or " "; JSON holds no raw control
# character, and the random test model drew one there while the opening class let it). xgrammar matches a
# string's pattern against its JSON-escaped text, so a character is an unescaped one or a valid JSON escape:
# with a bare ".", the 135M model wrote "don\'t", which no JSON parser reads.
# The repetition is unbounded on purpose. xgrammar takes no maxLength next to a pattern, and a bounded
# repetition ({0,599}) made it fill each row's token mask in ~300 ms per step, several times the model's own
# step; with "*" it takes ~0.02 ms (benchmarks/grammar_mask.py). So MAX_ARGUMENT_CHARS stands beside the pattern
# as maxLength, for validators and servers that enforce both, and local decoding bounds the argument by the
# row's max_new_tokens and steers a row that is about to run out of tokens to close its JSON (backends/local.py).
WORDED_ACTIONS: tuple[str, ...] = (ActionType.speak.value, ActionType.non_verbal.value, ActionType.action.value)
_JSON_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
WORDED_ARGUMENT = rf"^[^\s\x00-\x1f.,;:!?…\-\"'()\[\]{{}}<>*_~\\]{_JSON_CHAR}*$"
# Any argument, written as JSON allows: xgrammar's plain length-bounded string lets raw control characters through
FREE_ARGUMENT = rf"^{_JSON_CHAR}*$"


def action_json_schema(
    allowed: list[str] | None = None, recipients: list[str] | None = None, choices: list[str] | None = None
) -> dict[str, Any]:
    """The JSON schema an LLM is asked to follow (and constrained to, where possible).

    Speak, non-verbal communication and action must carry words (``WORDED_ARGUMENT``); ``none`` and
    ``leave`` take any argument, empty included. ``argument`` is capped at ``MAX_ARGUMENT_CHARS``. With both
    kinds allowed the schema is an ``anyOf`` of one object schema per kind.

    ``recipients`` (the others present, as the agent knows them; given only where there are at least two)
    adds an optional ``to``: a non-empty list of them, so that constrained decoding cannot address someone
    absent. ``choices`` (a game's vote or night move) makes ``action``'s argument one of them.
    """
    kinds = list(allowed or ACTION_TYPES)
    worded = [k for k in kinds if k in WORDED_ACTIONS]
    free = [k for k in kinds if k not in WORDED_ACTIONS]
    chosen: list[str] = []
    if choices:
        chosen = [k for k in worded if k == ActionType.action.value]
        worded = [k for k in worded if k != ActionType.action.value]
    to = {"type": "array", "items": {"enum": list(recipients)}, "minItems": 1} if recipients else None
    branches = [
        _action_object(group, argument, to)
        for group, argument in (
            (worded, {"type": "string", "pattern": WORDED_ARGUMENT, "maxLength": MAX_ARGUMENT_CHARS}),
            (chosen, {"type": "string", "enum": list(choices or [])}),
            (free, {"type": "string", "pattern": FREE_ARGUMENT, "maxLength": MAX_ARGUMENT_CHARS}),
        )
        if group
    ]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _action_object(kinds: list[str], argument: dict[str, Any], to: dict[str, Any] | None) -> dict[str, Any]:
    properties = {"action_type": {"type": "string", "enum": kinds}, "argument": argument}
    if to is not None:
        properties["to"] = to
    return {
        "type": "object",
        "properties": properties,
        "required": ["action_type", "argument"],
        "additionalProperties": False,
    }


class InvalidAction(ValueError):
    """Text or data that is not a valid action; the message says why."""


def coerce_action(value: Any) -> AgentAction:
    """An AgentAction from an AgentAction, a dict (action_type as name or index) or JSON text."""
    if isinstance(value, AgentAction):
        return value
    if isinstance(value, str):
        return parse_action(value)
    if isinstance(value, dict):
        data = dict(value)
        kind = data.get("action_type")
        if not isinstance(kind, str | bytes) and kind is not None:
            try:
                data["action_type"] = ACTION_TYPES[int(kind)]
            except (TypeError, ValueError, IndexError):
                raise InvalidAction(f"action_type index {kind!r} is not in 0..{len(ACTION_TYPES) - 1}") from None
        try:
            return AgentAction.model_validate(data)
        except ValidationError as exc:
            raise InvalidAction(f"invalid action {field_problem(exc, 'action')}") from None
    raise InvalidAction(f"an action must be a dict or JSON text, not {type(value).__name__}")


def parse_action(text: str) -> AgentAction:
    """Parse an action from JSON text; tolerant of code fences and surrounding prose."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`")
        body = body.split("\n", 1)[1] if "\n" in body else body
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end <= start:
        raise InvalidAction(f"no JSON object in {_preview(text)}")
    try:
        data = json.loads(body[start : end + 1])
    except json.JSONDecodeError as exc:
        raise InvalidAction(f"malformed JSON ({exc.msg}) in {_preview(text)}") from None
    if not isinstance(data, dict):
        raise InvalidAction(f"JSON is not an object in {_preview(text)}")
    return coerce_action({k: v for k, v in data.items() if k in ("action_type", "argument", "to")})


def _preview(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "…")
