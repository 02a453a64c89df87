"""Judges whose disagreement is known, served by one loopback OpenAI server (``loopback_openai.LoopbackOpenAI``).

Each model name on the server is a judge. Every agent of an episode has a true score per dimension (a hash of the
scenario text, the agent's name and the dimension, within its range); a judge answers the true score plus its
``offset``, plus its ``first_seat_bonus`` for the agent its prompt presents first (``agent_1``), plus a
deterministic noise of -1, 0 or +1 (a hash of the judge, episode, agent, dimension and the seats' order). So,
over many episodes: judge B minus judge A is about ``offset[B] - offset[A]`` plus the difference of half their
bonuses, and a judge's seat bias (``episodes.judge_agreement``) is about its ``first_seat_bonus``. An episode whose
scenario text contains one of ``broken[judge]`` gets a reply that is not JSON: the judge leaves it unrated.

No pytest imports: ``benchmarks/judge_agreement.py`` uses it too.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

_PARTICIPANTS = re.compile(r"^Participants: (.+)\.$", re.MULTILINE)
_DIMENSION = re.compile(r"^- ([a-z_]+) \((-?\d+) to (-?\d+)\):", re.MULTILINE)
_SCENARIO = re.compile(r"^Scenario: (.*)$", re.MULTILINE)


def _unit(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big")


@dataclass
class BiasedJudges:
    """The responder: ``LoopbackOpenAI(BiasedJudges(...), model_ids=(...))``."""

    offset: dict[str, int] = field(default_factory=dict)
    first_seat_bonus: dict[str, int] = field(default_factory=dict)
    broken: dict[str, tuple[str, ...]] = field(default_factory=dict)
    noise: bool = True

    def true_score(self, scenario: str, agent: str, dimension: str, low: int, high: int) -> int:
        """Within ``low + 2 .. high - 4``: room for an offset or a bonus of up to 2 and the noise, unclipped."""
        return low + 2 + _unit(scenario, agent, dimension) % (high - low - 5)

    def __call__(self, body: dict[str, Any]) -> str:
        judge = str(body.get("model", ""))
        prompt = str(body["messages"][-1]["content"])
        found = _SCENARIO.search(prompt)
        if found is None:  # not a rating request: a preflight's one-token probe
            return "OK"
        scenario = found.group(1)
        if any(marker in scenario for marker in self.broken.get(judge, ())):
            return "I would rather not rate this one."
        names = [part.split(" = ", 1)[1] for part in _PARTICIPANTS.search(prompt).group(1).split(", ")]  # type: ignore[union-attr]
        order = "|".join(names)
        reply = {}
        for position, name in enumerate(names):
            scores = {}
            for dim, low_text, high_text in _DIMENSION.findall(prompt):
                low, high = int(low_text), int(high_text)
                score = self.true_score(scenario, name, dim, low, high) + self.offset.get(judge, 0)
                score += self.first_seat_bonus.get(judge, 0) if position == 0 else 0
                score += _unit(judge, scenario, name, dim, order) % 3 - 1 if self.noise else 0
                scores[dim] = {"reasoning": f"{name} on {dim}", "score": max(low, min(high, score))}
            reply[f"agent_{position + 1}"] = scores
        return json.dumps(reply)
