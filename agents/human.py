"""``HumanAgent``: a person at the terminal plays a seat."""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.observation import Observation


class HumanAgent:
    """Shows the observation, then reads an action type (name or number) and its text.

    Reads from ``stdin`` (any text stream; piped input works). At end of input
    the human leaves.
    """

    def __init__(self, stdin: TextIO | None = None, stdout: TextIO | None = None) -> None:
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout

    async def act(self, observation: Observation) -> AgentAction:
        obs = Observation.from_env(observation)
        if not obs.my_turn:
            return AgentAction(action_type=ActionType.none)
        return await asyncio.to_thread(self._ask, obs)

    def _readline(self, prompt: str) -> str | None:
        self.stdout.write(prompt)
        self.stdout.flush()
        line = self.stdin.readline()
        return None if line == "" else line.rstrip("\n")

    def _ask(self, obs: Observation) -> AgentAction:
        self.stdout.write(f"\n{obs.text}\n")
        choices = obs.available_actions
        menu = "  ".join(f"[{i}] {a}" for i, a in enumerate(choices))
        while True:
            raw = self._readline(f"{menu}\naction> ")
            if raw is None:
                return AgentAction(action_type=ActionType.leave)
            raw = raw.strip()
            kind = choices[int(raw)] if raw.isdigit() and int(raw) < len(choices) else raw
            if kind not in choices:
                self.stdout.write(f"unknown action {raw!r}; choose one of: {', '.join(choices)}\n")
                continue
            argument = ""
            if kind not in ("none", "leave"):
                argument = self._readline("text> ") or ""
            return AgentAction(action_type=ActionType(kind), argument=argument)
