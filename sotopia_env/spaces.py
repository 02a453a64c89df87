"""Gymnasium spaces for free text.

``gymnasium.spaces.Text`` only admits characters from a fixed charset, but LLM
text is arbitrary Unicode. ``FreeText`` samples like ``Text`` (printable ASCII)
and admits any ``str`` up to ``max_length``.
"""

from __future__ import annotations

import json
import string
from typing import Any

from gymnasium import spaces

from sotopia_env.actions import ACTION_TYPES

PRINTABLE = string.ascii_letters + string.digits + string.punctuation + " "


class FreeText(spaces.Text):
    def __init__(self, max_length: int = 100_000, min_length: int = 0, seed: int | None = None) -> None:
        super().__init__(max_length=max_length, min_length=min_length, charset=PRINTABLE, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"FreeText({self.min_length}, {self.max_length})"


class ActionText(FreeText):
    """Action JSON text. ``sample()`` gives a valid action (any type but ``leave``, a short printable
    argument), so a random policy plays on instead of ending the episode with its first action."""

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        kinds = [a for a in ACTION_TYPES if a != "leave"]
        length = int(self.np_random.integers(1, 41))
        argument = "".join(self.np_random.choice(list(PRINTABLE), size=length))
        return json.dumps({"action_type": kinds[int(self.np_random.integers(len(kinds)))], "argument": argument})

    def __repr__(self) -> str:
        return f"ActionText({self.min_length}, {self.max_length})"


def action_space() -> spaces.Dict:
    """``{"action_type": index into ACTION_TYPES, "argument": text}``."""
    return spaces.Dict({"action_type": spaces.Discrete(len(ACTION_TYPES)), "argument": FreeText(max_length=2000)})


def observation_space(max_turns: int) -> spaces.Dict:
    """The structured observation; see ``sotopia_env.observation.Observation``."""
    entry = spaces.Dict(
        {
            "turn": spaces.Discrete(max_turns + 1),
            "agent": FreeText(max_length=200),
            "action_type": spaces.Discrete(len(ACTION_TYPES)),
            "argument": FreeText(),
            "to": spaces.Sequence(FreeText(max_length=200), stack=False),
        }
    )
    names = spaces.Sequence(FreeText(max_length=200), stack=False)
    return spaces.Dict(
        {
            "agent": FreeText(max_length=200),
            "turn": spaces.Discrete(max_turns + 1),
            "background": FreeText(),
            "history": spaces.Sequence(entry, stack=False),
            "available_actions": spaces.MultiBinary(len(ACTION_TYPES)),
            "text": FreeText(),
            "recipients": names,
            "phase": FreeText(max_length=200),
            "choices": spaces.Sequence(FreeText(max_length=400), stack=False),
            "topic": FreeText(),
        }
    )
