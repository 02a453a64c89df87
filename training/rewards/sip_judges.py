"""Judges of social-information-processing (SIP) stages in a piece of reasoning.

Social-R1 rewards reasoning that goes through the four SIP stages (Crick &
Dodge, 1994) in order: encoding social cues, interpreting them, clarifying
goals, and generating a response. A judge returns a :class:`StageJudgement`:
``stages_in_order`` in [0, 1] (the structure score) and one content score in
[0, 1] per stage. A judge that cannot produce a judgement raises
:class:`JudgeError`; it never returns a silent 0.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import json_repair

STAGES: tuple[str, ...] = ("encoding", "interpretation", "goal_clarification", "response_generation")


class JudgeError(RuntimeError):
    """A judge could not score a piece of reasoning."""


@dataclass(frozen=True)
class StageJudgement:
    """Structure score and per-stage content scores, all in [0, 1]; unknown stages are rejected."""

    stages_in_order: float
    stage_scores: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.stage_scores) - set(STAGES)
        if unknown:
            raise JudgeError(f"unknown stage(s) {sorted(unknown)}; expected {list(STAGES)}")
        for name, value in [("stages_in_order", self.stages_in_order), *self.stage_scores.items()]:
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
                raise JudgeError(f"score '{name}' must be a number in [0, 1], got {value!r}")

    @property
    def content(self) -> float:
        """Mean content score over the four stages; a stage without a score counts 0."""
        return sum(self.stage_scores.get(stage, 0.0) for stage in STAGES) / len(STAGES)


@runtime_checkable
class SIPJudge(Protocol):
    def judge(self, context: str, reasoning: str) -> StageJudgement: ...


@runtime_checkable
class BatchSIPJudge(SIPJudge, Protocol):
    """A judge that scores many pieces of reasoning at once (one backend call)."""

    def judge_batch(self, pairs: Sequence[tuple[str, str]]) -> list[StageJudgement | JudgeError]: ...


# Phrases (case-insensitive regular expressions) that mark each stage. A stage starts at
# the first match of any of its phrases; headings such as "Encoding:" or "Goals:" match.
DEFAULT_STAGE_MARKERS: dict[str, tuple[str, ...]] = {
    "encoding": (r"\bencod\w*", r"\bnotic(?:e|es|ed|ing)\b", r"\bobserv\w*", r"\bperceiv\w*"),
    "interpretation": (r"\binterpret\w*", r"\binfer\w*", r"\battribut\w*", r"\bimpl(?:y|ies|ied)\b"),
    "goal_clarification": (r"\bgoals?\b", r"\bclarif\w*", r"\bobjectives?\b", r"\bdesired outcome\b"),
    "response_generation": (
        r"\brespon(?:d|ds|se|ses|ding)\b",
        r"\bgenerat\w*",
        r"\bbest (?:answer|choice|option|action)\b",
        r"\bdecid\w*|\bdecision\b",
    ),
}


def _longest_ordered_chain(positions: Sequence[int | None]) -> int:
    """Length of the longest chain of found stages whose positions increase in stage order."""
    found = [p for p in positions if p is not None]
    best: list[int] = []
    for i, pos in enumerate(found):
        best.append(1 + max((best[j] for j in range(i) if found[j] < pos), default=0))
    return max(best, default=0)


@dataclass(frozen=True)
class RuleBasedSIPJudge:
    """Keyword judge: finds each stage by its marker phrases; ignores the context.

    * ``stages_in_order``: length of the longest chain of detected stages whose
      first markers appear in stage order, divided by 4 (1.0 = all four in order).
    * stage content: a stage's section runs from its first marker to the next
      detected stage's marker (or the end); it scores ``min(1, words / min_section_words)``,
      0 when the stage is not detected.
    """

    markers: Mapping[str, Sequence[str]] = field(default_factory=lambda: dict(DEFAULT_STAGE_MARKERS))
    min_section_words: int = 8

    def _position(self, stage: str, reasoning: str) -> int | None:
        hits = [m.start() for p in self.markers.get(stage, ()) if (m := re.search(p, reasoning, re.IGNORECASE))]
        return min(hits, default=None)

    def judge(self, context: str, reasoning: str) -> StageJudgement:
        positions = [self._position(stage, reasoning) for stage in STAGES]
        starts = sorted(p for p in positions if p is not None)
        scores = {}
        for stage, pos in zip(STAGES, positions, strict=True):
            if pos is None:
                scores[stage] = 0.0
                continue
            end = next((s for s in starts if s > pos), len(reasoning))
            words = len(reasoning[pos:end].split())
            scores[stage] = min(1.0, words / self.min_section_words)
        return StageJudgement(_longest_ordered_chain(positions) / len(STAGES), scores)


JUDGE_SYSTEM_PROMPT = (
    "You grade the reasoning of a model about a social situation against the four stages of "
    "social information processing, which good reasoning goes through in this order:\n"
    "1. encoding: noticing the relevant social cues in the situation;\n"
    "2. interpretation: interpreting those cues (intentions, feelings, causes);\n"
    "3. goal_clarification: clarifying the goals of the people involved;\n"
    "4. response_generation: generating and choosing a fitting response or answer.\n"
    'Return only JSON: {"stages_in_order": s, "stage_scores": {"encoding": e, '
    '"interpretation": i, "goal_clarification": g, "response_generation": r}}, where s is '
    "1 if all four stages appear in this order, partial credit in [0, 1] otherwise, and each "
    "stage score in [0, 1] grades how accurate and substantive that stage is (0 if absent)."
)

_SCORE = {"type": "number", "minimum": 0, "maximum": 1}
JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "stages_in_order": _SCORE,
        "stage_scores": {
            "type": "object",
            "properties": {stage: _SCORE for stage in STAGES},
            "required": list(STAGES),
            "additionalProperties": False,
        },
    },
    "required": ["stages_in_order", "stage_scores"],
    "additionalProperties": False,
}


def parse_judgement(text: str) -> StageJudgement:
    """Parse a judge's JSON reply (lightly repaired); JudgeError if fields are missing or out of range."""
    data = json_repair.loads(text)
    if not isinstance(data, dict) or "stages_in_order" not in data or not isinstance(data.get("stage_scores"), dict):
        raise JudgeError(f"judge reply lacks 'stages_in_order' or 'stage_scores': {text[:200]!r}")
    scores = data["stage_scores"]
    missing = [stage for stage in STAGES if stage not in scores]
    if missing:
        raise JudgeError(f"judge reply lacks stage score(s) {missing}")
    return StageJudgement(data["stages_in_order"], dict(scores))


class LLMSIPJudge:
    """Judge through a chat backend (``async generate(list[ChatRequest]) -> list[Completion]``).

    Asks for JSON matching :data:`JUDGE_SCHEMA`. A backend error (an error
    completion or an exception from ``generate``), a malformed reply or
    out-of-range scores raise (``judge``) or come back as :class:`JudgeError`
    items (``judge_batch``). ``judge_batch`` sends all pairs in
    one ``generate`` call, through ``asyncio.run``, so it must not be called from
    inside a running event loop.
    """

    def __init__(
        self,
        backend: Any,
        *,
        temperature: float = 0.0,
        max_new_tokens: int = 256,
        seed: int | None = None,
        system_prompt: str = JUDGE_SYSTEM_PROMPT,
    ) -> None:
        self.backend = backend
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.system_prompt = system_prompt

    def _request(self, context: str, reasoning: str) -> Any:
        from sotopia_env.backends.base import ChatRequest  # lazy: keeps this module backend-free

        user = f"Situation:\n{context}\n\nReasoning to grade:\n{reasoning}"
        return ChatRequest(
            messages=[{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}],
            json_schema=JUDGE_SCHEMA,
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            seed=self.seed,
        )

    def judge_batch(self, pairs: Sequence[tuple[str, str]]) -> list[StageJudgement | JudgeError]:
        if not pairs:
            return []
        requests = [self._request(context, reasoning) for context, reasoning in pairs]
        try:
            replies = asyncio.run(self.backend.generate(requests))
        except Exception as exc:  # a failed call fails every judgement in it, explicitly
            return [JudgeError(f"judge backend failed: {exc!r}") for _ in pairs]
        if len(replies) != len(requests):
            raise JudgeError(f"backend returned {len(replies)} completions for {len(requests)} requests")
        return [self._parse(reply) for reply in replies]

    @staticmethod
    def _parse(reply: Any) -> StageJudgement | JudgeError:
        if getattr(reply, "error", None):
            return JudgeError(f"judge backend error: {reply.error}")
        try:
            return parse_judgement(reply.text)
        except JudgeError as exc:
            return exc

    def judge(self, context: str, reasoning: str) -> StageJudgement:
        result = self.judge_batch([(context, reasoning)])[0]
        if isinstance(result, JudgeError):
            raise result
        return result
