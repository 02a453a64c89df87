"""``social_turns``: SOTOPIA-RL's recipe, one prompt per turn of stored rated episodes, an LLM judge as reward.

Prompts: every turn of every seat of the rated episodes in ``data`` (our episodes JSONL, as ``episodes export``
writes it) on ``train``-split scenarios, rendered by ``sotopia_env.prompt.render_prompt`` exactly as the agent
saw it (``training.dataset`` replays the episodes). Episodes of other splits are left out. Verifiable episodes
(``sotopia_env.kinds``) count too: the learner's seat gives prompts, the ``rule-partner``'s seat does not
(a rule partner's lines are not a policy's).

Rewards:

- ``action_valid``: 1 when the completion parses as an action (``sotopia_env.actions.parse_action``), else 0;
- ``verifiable_turn``: on prompts of verifiable episodes, the rule judge's exact goal (0-10) had the episode
  ended right after this move and the rule partner's answer (a deal at a price, an agreed slot, a yes);
  ``None`` on other prompts and for a completion that is not an action. Only added when the data holds
  verifiable episodes;
- ``utterance_score``: an LLM judge rates the action 0-10 for how well it serves the agent's goal in that
  state. One batched, schema-constrained backend call per reward call; a reply that failed or is not a score
  in range is ``None`` (never 0), and so is a completion that is not an action. Scores are cached per
  (state, candidate), so a repeated candidate is not judged twice.

Options (``task_options``): ``judge`` (a model spec, default the embedded ``smollm2-135m``; ``none`` for no LLM
judge, e.g. on verifiable episodes alone), ``api_base``, ``prompt`` (the prompt the turns are rendered in,
``sotopia_env.prompt.PROMPTS``; default SOTOPIA's): the trained model records it and is prompted with it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError

from sotopia_env.actions import AgentAction, InvalidAction, parse_action
from sotopia_env.agents.loading import RULE_PARTNER
from sotopia_env.backends.base import Backend, ChatRequest
from sotopia_env.evaluators import run_to_completion
from sotopia_env.kinds import PARTNER_SEAT, kind_for, validate_facts
from sotopia_env.prompt import SOTOPIA
from sotopia_env.specs import DEFAULT_MODEL
from sotopia_env.training.rewards._text import completion_text
from sotopia_env.training.rl.registry import RLTask, TaskError, register_task

if TYPE_CHECKING:
    from sotopia_env.episodes.log import EpisodeLog
    from sotopia_env.training.dataset import Sample

SCORE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 10}},
    "required": ["score"],
    "additionalProperties": False,
}
JUDGE_INSTRUCTION = (
    "You rate one move of an agent in a social interaction. Below is exactly what the agent saw, then the move "
    "it made. Rate from 0 to 10 how much the move helps the agent achieve its social goal while keeping the "
    'relationship and staying believable (0: harmful or absurd, 10: excellent). Reply only with {"score": N}.'
)


class UtteranceScore(BaseModel):
    score: int = Field(ge=0, le=10)


def action_valid(prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
    """1.0 when the completion is a well-formed action, else 0.0."""
    return [1.0 if _action(c) is not None else 0.0 for c in completions]


def _parsed(completion: Any) -> AgentAction | None:
    try:
        return parse_action(completion_text(completion))
    except InvalidAction:
        return None


def _action(completion: Any) -> str | None:
    action = _parsed(completion)
    return action.to_json() if action is not None else None


def parse_score(text: str) -> float | None:
    """The judge's score, or None when the reply is not ``{"score": 0..10}``."""
    try:
        return float(UtteranceScore.model_validate(json.loads(text)).score)
    except (json.JSONDecodeError, ValidationError, TypeError):
        return None


def state_text(prompt: Any) -> str:
    """What the agent saw: every message of the rendered prompt (the system one holds its goal)."""
    return prompt if isinstance(prompt, str) else "\n\n".join(str(m.get("content") or "") for m in prompt)


class UtteranceJudge:
    """The ``utterance_score`` reward: an LLM judge, batched, cached per (state, candidate)."""

    def __init__(self, backend: Backend, max_new_tokens: int = 16) -> None:
        self.backend = backend
        self.max_new_tokens = max_new_tokens
        self.cache: dict[tuple[str, str], float] = {}
        self.__name__ = "utterance_score"  # TRL names the reward by it

    def request(self, state: str, action: str) -> ChatRequest:
        content = f"{JUDGE_INSTRUCTION}\n\n# What the agent saw\n{state}\n\n# The agent's move\n{action}"
        return ChatRequest(
            messages=[{"role": "user", "content": content}],
            json_schema=SCORE_SCHEMA,
            temperature=0.0,
            max_new_tokens=self.max_new_tokens,
        )

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        actions = [_action(c) for c in completions]
        keys = [(state_text(p), a) if a else None for p, a in zip(prompts, actions, strict=True)]
        todo = list(dict.fromkeys(k for k in keys if k is not None and k not in self.cache))
        if todo:
            replies = run_to_completion(self.backend.generate([self.request(*key) for key in todo]))
            for key, reply in zip(todo, replies, strict=True):
                score = parse_score(reply.text) if reply.ok else None
                if score is not None:  # failures are not cached: a later call may rate them
                    self.cache[key] = score
        return [self.cache.get(k) if k is not None else None for k in keys]


def verifiable_turn(
    prompts: Sequence[Any], completions: Sequence[Any], verifiable_state: Sequence[str] = (), **columns: Any
) -> list[float | None]:
    """The exact goal of each move on a verifiable state (see the module doc); None elsewhere."""
    states = list(verifiable_state) or [""] * len(completions)
    out: list[float | None] = []
    for completion, state in zip(completions, states, strict=True):
        action = _parsed(completion)
        if not state or action is None:
            out.append(None)
            continue
        data = json.loads(state)
        facts = validate_facts(data["facts"])
        exchanges = [(by_partner, AgentAction.model_validate(a)) for by_partner, a in data["exchanges"]]
        out.append(float(kind_for(facts).outcome_after(facts, exchanges, action).goal))
    return out


def verifiable_state(log: EpisodeLog, turn: int) -> str:
    """What ``verifiable_turn`` needs of a learner turn: the hidden facts and the exchanges before it (JSON)."""
    facts = log.setup.scenario.verifiable
    if facts is None:
        return ""
    partner = log.setup.agent_names[PARTNER_SEAT]
    exchanges = [(t.agent == partner, t.action.to_dict()) for t in log.turns if t.turn < turn]
    return json.dumps({"facts": facts.model_dump(), "exchanges": exchanges})


def no_rule_partner(samples: list[Sample]) -> list[Sample]:
    """Drop the seats a ``rule-partner`` played."""
    return [s for s in samples if s.model != RULE_PARTNER]


def turn_dataset(data: str, max_items: int | None, prompt: str = SOTOPIA):
    """The per-turn prompts of the rated train-split episodes in ``data``, rendered in ``prompt``."""
    from sotopia_env.episodes.export import import_jsonl
    from sotopia_env.training.dataset import build_dataset

    try:
        logs = import_jsonl(data)
    except (ValueError, OSError) as exc:
        raise TaskError(str(exc)) from None
    logs = [log for log in logs if log.setup.scenario.split == "train"]
    try:
        dataset, _ = build_dataset(logs, sample_filters=[no_rule_partner], prompt=prompt)
    except ValueError as exc:  # an unknown prompt name
        raise TaskError(f"task 'social_turns': {exc}") from None
    if len(dataset) == 0:
        raise TaskError(f"{data}: no turns of rated episodes on train-split scenarios")
    dataset = dataset.select_columns(["prompt", "episode_id", "scenario_id", "agent", "turn", "prompt_name"])
    if any(log.setup.scenario.verifiable for log in logs):
        by_id = {log.id: log for log in logs}
        states = [verifiable_state(by_id[e], t) for e, t in zip(dataset["episode_id"], dataset["turn"], strict=True)]
        dataset = dataset.add_column("verifiable_state", states)
    return dataset.select(range(min(max_items, len(dataset)))) if max_items else dataset


@register_task("social_turns")
def social_turns_task(
    data: str | None,
    max_items: int | None,
    judge: str = DEFAULT_MODEL,
    api_base: str | None = None,
    prompt: str = SOTOPIA,
) -> RLTask:
    from sotopia_env.backends.resolve import resolve_backend

    if not data:
        raise TaskError("task 'social_turns' needs a data file (set 'data': an episodes JSONL)")
    dataset = turn_dataset(data, max_items, prompt)
    rewards: list = [action_valid]
    if "verifiable_state" in dataset.column_names:
        rewards.append(verifiable_turn)
    if judge.strip().lower() != "none":
        rewards.append(UtteranceJudge(resolve_backend(judge, api_base)))
    return RLTask("social_turns", dataset, rewards)
