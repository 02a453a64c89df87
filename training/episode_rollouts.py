"""The rollouts of episode GRPO (``training.episode_grpo``): whole episodes of the policy against a partner, with
exactly the token ids it sampled, the moves that earned credit, a reward, and the choice of group starts.

- **Sampled ids.** The policy's backend is a ``LocalBackend`` asked for ``logprobs``: every completion carries the
  ids it sampled (``token_ids``, the stop token included), their log-probabilities under the policy at the
  sampling temperature (``logprobs``: the ratio's denominator) and under the distribution that really drew them
  (``sampler_logprobs``: after the grammar mask, for the importance weight). A ``Sample`` holds those, never
  re-tokenised text (under the grammar the model picks splits such as ``"`` + ``}`` that re-tokenise as ``"}``).
- **Credit.** Only the completion that became a move is trained (``LLMAgent.last_reply``): retries and failed
  calls get no gradient. On a verifiable scenario, the moves after the partner's deciding answer (a deal, or the
  partner leaving) get none either: they could not change the outcome.
- **Reward.** The evaluator's rating of the policy's seat (``None`` when unrated: no advantage, never 0), plus an
  optional dense part on verifiable scenarios (the kind's partial credit), capped so that success always
  dominates: ``sotopia_env.rewards.episode_reward``, where every rating becomes a reward.
- **Self-play.** With ``Rollout.self_play`` the policy sits in every seat (no partner): each seat's credited
  turns are its own samples and its reward is its own rating (``Episode.seats``); ``by_seat`` splits a group of
  episodes into one group per seat, so GRPO's group baseline compares a seat with the same seat of the same start
  (groups keyed by (start, seat)), never a seller's reward with a buyer's.
- **Starts.** ``StartPicker`` hands out group starts with the scenario kinds interleaved (a step mixes kinds) and,
  with dynamic sampling, skips a start whose last group had equal rewards (all won or all lost) for a few steps.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from typing import Any

from sotopia_env.agents.base import Agent
from sotopia_env.agents.llm import LLMAgent
from sotopia_env.backends.base import Backend, ChatRequest, Completion, GenerationSettings
from sotopia_env.env import EnvConfig
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.evaluators import Evaluator
from sotopia_env.kinds import PARTNER_SEAT, kind_for
from sotopia_env.observation import Observation
from sotopia_env.rewards import Reward, episode_reward, team_reward

DECIDING = ("accept", "leave", "goodbye")  # the partner's moves after which nothing the learner says counts


class MissingSampledIds(RuntimeError):
    """The policy's backend returned a completion without the ids it sampled (it must be a ``LocalBackend`` or
    a ``served_policy.ServedPolicyBackend``)."""


class RecordingBackend:
    """Passes requests on with ``logprobs=True`` and keeps every ``(request, completion)``: one policy agent's
    calls, retries included."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.model = inner.model
        self.calls: list[tuple[ChatRequest, Completion]] = []

    async def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        asked = [replace(r, logprobs=True) for r in requests]
        out = await self.inner.generate(asked)
        self.calls.extend(zip(asked, out, strict=True))
        return out


@dataclass
class Sample:
    """One generation of the policy as it was sampled: the prompt ids it saw, the ids it drew, and their
    log-probabilities under the policy at the sampling temperature and under the sampler (grammar mask
    included)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None  # None: sampled by a server; the trainer scores it (``episode_grpo.score_served``)
    sampler_logprobs: list[float]


def sample_of(completion: Completion) -> Sample:
    """The ``Sample`` a local backend's completion recorded; ``MissingSampledIds`` when it recorded none."""
    meta = completion.meta
    if "token_ids" not in meta:
        raise MissingSampledIds(
            "the policy's completion has no sampled token ids: episode GRPO needs a LocalBackend asked for logprobs "
            "or a rollout server"
        )
    logprobs = None if meta["logprobs"] is None else list(meta["logprobs"])
    return Sample(list(meta["prompt_ids"]), list(meta["token_ids"]), logprobs, list(meta["sampler_logprobs"]))


class CreditingAgent:
    """Wraps the policy's ``LLMAgent`` and notes, per turn it played, the completion its move came from."""

    def __init__(self, agent: LLMAgent) -> None:
        self.agent = agent
        self.moves: list[tuple[int, Completion]] = []  # (env turn, the completion that became the move)

    def reset(self) -> None:
        self.agent.reset()
        self.moves.clear()

    async def act(self, observation: Any) -> Any:
        action = await self.agent.act(observation)
        if self.agent.last_reply is not None:
            self.moves.append((Observation.from_env(observation).turn, self.agent.last_reply))
        return action


def decided_turn(log: EpisodeLog) -> int | None:
    """The turn of the partner's answer that decided a verifiable episode (a deal, or the partner leaving), as
    the judge replays it (``Kind.replay``: one move per partner turn); None when the scenario is not
    verifiable or nothing was decided before the end."""
    facts = log.setup.scenario.verifiable
    if facts is None:
        return None
    partner = log.setup.agent_names[PARTNER_SEAT]
    talk = kind_for(facts).replay(facts, ((t.agent == partner, t.action) for t in log.turns))
    partner_turns = [t.turn for t in log.turns if t.agent == partner]
    return next((turn for move, turn in zip(talk.moves, partner_turns, strict=True) if move.act in DECIDING), None)


def credited_samples(log: EpisodeLog, moves: Sequence[tuple[int, Completion]], deciding: bool = False) -> list[Sample]:
    """The samples of the moves that could shape the outcome: every move before the deciding answer, and with
    ``deciding`` (the partner's seat, played by the policy in self-play) that answer too."""
    decided = decided_turn(log)
    return [sample_of(c) for turn, c in moves if decided is None or turn < decided or (deciding and turn == decided)]


@dataclass
class SeatPart:
    """One learner seat's share of an episode: its own reward and its own credited samples."""

    reward: Reward
    samples: list[Sample]
    calls: int = 0


@dataclass
class Episode:
    log: EpisodeLog | None  # None: the episode could not be played (error)
    reward: Reward
    samples: list[Sample]  # the credited generations
    calls: int = 0  # every call the policy made (retries and failures included)
    error: str | None = None
    seats: dict[int, SeatPart] = field(default_factory=dict)  # per learner seat (self-play splits on these)


def by_seat(group: Sequence[Episode]) -> list[list[Episode]]:
    """A self-play group split into one group per learner seat, each episode reduced to that seat's reward,
    samples and calls: GRPO's groups keyed by (start, seat). An episode that could not be played counts as unrated
    in every seat. A group without per-seat parts (one learner seat) comes back whole."""
    seats = sorted({s for e in group for s in e.seats})
    if len(seats) < 2:
        return [list(group)]
    return [
        [
            Episode(e.log, e.seats[s].reward, e.seats[s].samples, e.seats[s].calls, e.error)
            if s in e.seats
            else Episode(e.log, Reward(None), [], 0, e.error)
            for e in group
        ]
        for s in seats
    ]


# -- playing ------------------------------------------------------------------------------------------------------


@dataclass
class Rollout:
    """Everything a rollout needs besides the policy's backend. The policy plays ``seat``, or, with ``role``, every
    seat whose game role or team is ``role`` (one role's seat, or a whole team); ``partner`` plays the others.
    With ``self_play`` the policy plays every seat, each seat rewarded by its own rating (``partner`` unused)."""

    setups: list[EpisodeSetup]
    seat: int
    partner: str
    evaluator: Evaluator | None
    env: EnvConfig
    settings: GenerationSettings
    constrained: bool = True
    api_base: str | None = None
    turn_reward: float = 0.0
    dense_reward: float = 0.0
    partner_settings: GenerationSettings = field(default_factory=GenerationSettings)
    role: str | None = None
    prompt: str | None = None  # the policy's prompt (sotopia_env.prompt); None: its backend's
    self_play: bool = False  # the policy in every seat, one reward per seat (``by_seat``)

    def partner_agent(self) -> Agent:
        from sotopia_env.agents.loading import load_agent

        return load_agent(self.partner, settings=self.partner_settings, api_base=self.api_base)

    def learner_seats(self, setup: EpisodeSetup) -> list[int]:
        """The seats the policy plays in ``setup``; ValueError (one line) when there are none."""
        game = setup.scenario.game
        if self.self_play:
            seats = list(range(setup.scenario.num_agents))
        elif self.role is None:
            seats = [self.seat] if self.seat < setup.scenario.num_agents else []
        elif game is None:
            seats = []
        else:
            seats = [s for s in range(len(game.seats)) if self.role in (game.role(s).name, game.role(s).team)]
        if not seats:
            who = f"role or team {self.role!r}" if self.role is not None else f"seat {self.seat + 1}"
            raise ValueError(f"scenario {setup.scenario.id!r} has no {who} for the policy to play")
        return seats


async def play_one(rollout: Rollout, backend: Backend, setup: EpisodeSetup, seed: int) -> Episode:
    """One episode of the policy (on ``backend``) in its seat against the partner, rated; its credited samples."""
    from sotopia_env.episodes.runner import play

    learners = rollout.learner_seats(setup)
    recorders = {seat: RecordingBackend(backend) for seat in learners}  # each seat's calls counted apart
    constrained = rollout.constrained
    policies = {  # one agent per seat (each keeps its own moves); the seeds differ so teammates do not sample alike
        seat: CreditingAgent(
            LLMAgent(
                recorders[seat],
                settings=replace(rollout.settings, seed=seed + 7919 * k),
                constrained=constrained,
                prompt=rollout.prompt,
            )
        )
        for k, seat in enumerate(learners)
    }
    try:
        seats: list[Agent] = [policies.get(s) or rollout.partner_agent() for s in range(setup.scenario.num_agents)]
        specs = [backend.model if s in policies else rollout.partner for s in range(len(seats))]
        log = await play(setup, seats, rollout.evaluator, rollout.env, specs, seed=seed)
    except MissingSampledIds:
        raise
    except Exception as exc:  # a partner or judge that breaks: this episode is unrated, the run goes on
        calls = sum(len(r.calls) for r in recorders.values())
        return Episode(None, Reward(None), [], calls, f"{type(exc).__name__}: {exc}")
    parts = {
        seat: SeatPart(
            episode_reward(log, seat, rollout.env.reward_dimension, rollout.turn_reward, rollout.dense_reward),
            credited_samples(log, policies[seat].moves, deciding=seat == PARTNER_SEAT and len(learners) > 1),
            len(recorders[seat].calls),
        )
        for seat in learners
    }
    samples = [sample for part in parts.values() for sample in part.samples]
    calls = sum(part.calls for part in parts.values())
    return Episode(log, team_reward([p.reward for p in parts.values()]), samples, calls, seats=parts)


async def play_many(rollout: Rollout, backend: Backend, starts: Sequence[tuple[EpisodeSetup, int]]) -> list[Episode]:
    """Every (setup, seed) concurrently: the policy's requests meet in the local backend's batches."""
    return list(await asyncio.gather(*(play_one(rollout, backend, s, seed) for s, seed in starts)))


def policy_backend(model: Any, tokenizer: Any, name: str, max_batch_size: int, executor: Executor) -> Backend:
    """A local backend on the live model, a fresh one per step: its prefix cache holds this step's weights only.
    It generates on ``executor``, the loop's one torch thread, where the updates run too."""
    from sotopia_env.backends.local import LocalBackend

    return LocalBackend(model, tokenizer, name, max_batch_size=max_batch_size, prefix_cache_mb=2048, executor=executor)


# -- group starts -------------------------------------------------------------------------------------------------


def kind_of(setup: EpisodeSetup) -> str:
    """A start's kind: the verifiable kind, else the game's rule set, else the scenario's first tag, else
    ``other``."""
    facts = setup.scenario.verifiable
    if facts is not None:
        return str(facts.kind)
    if setup.scenario.game is not None:
        return setup.scenario.game.rules
    return setup.scenario.tags[0] if setup.scenario.tags else "other"


def interleaved(setups: Sequence[EpisodeSetup], seed: int) -> list[int]:
    """The indices of ``setups``, shuffled by ``seed`` within each kind, the kinds taken in turn."""
    by_kind: dict[str, list[int]] = {}
    for index, setup in enumerate(setups):
        by_kind.setdefault(kind_of(setup), []).append(index)
    rng = random.Random(seed)
    queues = [rng.sample(ids, len(ids)) for _, ids in sorted(by_kind.items())]
    order = []
    while any(queues):
        for queue in queues:
            if queue:
                order.append(queue.pop(0))
    return order


def has_signal(rewards: Sequence[Reward]) -> bool:
    """Whether a group's rewards can teach anything: two or more rated, not all equal."""
    rated = [r.value for r in rewards if r.value is not None]
    return len(rated) >= 2 and statistics.pstdev(rated) > 1e-4


@dataclass
class StartPicker:
    """Hands out group starts in ``interleaved`` order. With ``dynamic`` (DAPO-style dynamic sampling), a start
    whose last group had equal rewards (all won or all lost: no signal) is skipped until ``revisit_after`` steps
    have passed, and its running success rate is kept for the log."""

    order: list[int]
    dynamic: bool = True
    revisit_after: int = 4
    cursor: int = 0
    flat_since: dict[int, int] = field(default_factory=dict)  # start -> the step its last group had no signal
    success_rate: dict[int, float] = field(default_factory=dict)  # start -> running (EMA 0.5) success rate

    def pick(self, count: int, step_: int) -> tuple[list[int], int]:
        """``count`` starts for this step, and how many were skipped; a full lap of skips takes them anyway."""
        chosen: list[int] = []
        skipped = 0
        for _ in range(len(self.order)):
            if len(chosen) == count:
                break
            start = self.order[self.cursor % len(self.order)]
            self.cursor += 1
            if self.dynamic and step_ - self.flat_since.get(start, -(10**9)) <= self.revisit_after:
                skipped += 1
                continue
            chosen.append(start)
        while len(chosen) < count:  # every start is resting: take them in order all the same
            chosen.append(self.order[self.cursor % len(self.order)])
            self.cursor += 1
        return chosen, skipped

    def record(self, start: int, step_: int, rewards: Sequence[Reward], signal: bool | None = None) -> bool:
        """Note a played group; whether it carried signal (``has_signal``, unless the caller decided: self-play
        judges each seat's group apart)."""
        signal = has_signal(rewards) if signal is None else signal
        if signal:
            self.flat_since.pop(start, None)
        else:
            self.flat_since[start] = step_
        verdicts = [r.success for r in rewards if r.success is not None]
        if verdicts:
            rate = statistics.fmean(verdicts)
            self.success_rate[start] = (
                rate if start not in self.success_rate else 0.5 * (self.success_rate[start] + rate)
            )
        return signal

    def state(self) -> dict[str, Any]:
        return {
            "cursor": self.cursor,
            "flat_since": {str(k): v for k, v in self.flat_since.items()},
            "success_rate": {str(k): v for k, v in self.success_rate.items()},
        }

    def load(self, state: dict[str, Any]) -> None:
        self.cursor = int(state.get("cursor", 0))
        self.flat_since = {int(k): int(v) for k, v in state.get("flat_since", {}).items()}
        self.success_rate = {int(k): float(v) for k, v in state.get("success_rate", {}).items()}
