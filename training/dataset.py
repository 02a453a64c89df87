"""Episodes -> a chat-format dataset: one example per turn of the chosen agent(s).

Every example is in TRL's conversational prompt-completion format::

    {"prompt": [system, ...], "completion": [{"role": "assistant", "content": <action JSON>}], ...metadata}

``prompt`` is exactly ``sotopia_env.prompt.render_prompt(observation, prompt)`` (the function
``LLMAgent`` prompts with and the Gymnasium env observes through) for the
observation the agent had on that turn, under the prompt of the model being trained
(``prompt=``: ``sotopia_env.backends.resolve.prompt_for_model`` of it; the trained model
directory records it, and is prompted with it ever after). Each row names it (``prompt_name``), and the
trainer records that name (``dataset_prompt``). The observation is rebuilt by replaying
the episode's recorded actions through ``SocialEnv``, so the model is trained on
exactly what it would see at inference. ``SFTTrainer`` puts the loss on the
completion (the assistant's action) only.

The pipeline, top to bottom (``build_dataset``):

1. refuse episodes of ``test`` scenarios (``TestSplitError``);
2. skip failed and unrated episodes (counted, never silently); with ``keep_unrated`` (data rated or
   filtered elsewhere, e.g. the released SOTOPIA-pi episodes, and no rating filters) unrated ones are kept;
3. split each episode into ``Sample``s, one per seat, and run the sample filters
   (e.g. SOTOPIA-pi's best episode per scenario and role, a goal threshold);
4. replay the kept samples into ``Example``s and run the example filters
   (e.g. drop ``none`` turns, balance the seats).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sotopia_env.actions import ActionType
from sotopia_env.env import EnvConfig, SocialEnv
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.errors import UserError
from sotopia_env.observation import Observation
from sotopia_env.prompt import SOTOPIA, prompt_function, render_prompt
from sotopia_env.transcript import MODERATOR, Turn

_NO_LIMIT = 10**9


class TestSplitError(UserError, ValueError):
    """An episode of a ``test`` scenario was offered for training."""

    __test__ = False  # not a pytest test class, despite the name


class ReplayError(ValueError):
    """A recorded episode does not replay through the env (e.g. it was played in ``random`` action order)."""


@dataclass(frozen=True)
class Sample:
    """One seat of one rated episode: the unit the episode-level filters rank and keep."""

    log: EpisodeLog
    seat: int

    @property
    def agent(self) -> str:
        return self.log.setup.agent_names[self.seat]

    @property
    def scenario_id(self) -> str:
        return self.log.scenario_id

    @property
    def model(self) -> str:
        return self.log.agents[self.seat].model

    def score(self, dimension: str) -> float:
        value = self.log.score(self.agent, dimension)
        return float("nan") if value is None else value


@dataclass
class Example:
    """One training example: the prompt the agent saw on a turn and the action it took."""

    prompt: list[dict[str, str]]
    completion: list[dict[str, str]]
    episode_id: str
    scenario_id: str
    seat: int
    agent: str
    turn: int
    action_type: str
    goal: float
    prompt_name: str = SOTOPIA  # the prompt ``prompt`` was rendered in (sotopia_env.prompt.PROMPTS)

    def to_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


SampleFilter = Callable[[list[Sample]], list[Sample]]
ExampleFilter = Callable[[list[Example]], list[Example]]


@dataclass
class DatasetStats:
    """What happened to the episodes on their way into the dataset."""

    episodes: int = 0
    skipped_failed: int = 0
    skipped_unrated: int = 0
    unrated_kept: int = 0
    samples: int = 0
    samples_kept: int = 0
    examples_replayed: int = 0
    examples: int = 0
    per_seat: dict[int, int] = field(default_factory=dict)

    def summary(self) -> str:
        seats = ", ".join(f"seat {s + 1}: {n}" for s, n in sorted(self.per_seat.items())) or "none"
        if self.unrated_kept:
            head = (
                f"{self.episodes} episodes, {self.unrated_kept} unrated: rating filters off "
                f"({self.skipped_failed} failed skipped)"
            )
        else:
            head = f"{self.episodes} episodes ({self.skipped_failed} failed and {self.skipped_unrated} unrated skipped)"
        return (
            f"{head}; {self.samples_kept}/{self.samples} agent-episodes kept; "
            f"{self.examples}/{self.examples_replayed} turns kept ({seats})"
        )


def refuse_test_split(logs: Iterable[EpisodeLog]) -> None:
    """Raise ``TestSplitError`` naming the first episode whose scenario is in the ``test`` split."""
    for log in logs:
        if log.setup.scenario.split == "test":
            raise TestSplitError(
                f"episode {log.id} is from test scenario {log.scenario_id!r}; test episodes may not be trained on"
            )


def replay(log: EpisodeLog, config: EnvConfig | None = None) -> Iterator[tuple[Turn, Observation]]:
    """Each recorded turn with the observation its agent had just before acting.

    The episode is replayed through ``SocialEnv`` with its setup, action order,
    seed and recorded actions; the limits of ``config`` are lifted so that the
    replay never ends early.
    """
    config = dataclasses.replace(
        config or EnvConfig(),
        action_order=log.action_order,
        max_turns=_NO_LIMIT,
        stale_turns=_NO_LIMIT,
        max_agent_errors=_NO_LIMIT,
    )
    env = SocialEnv(setup=log.setup, config=config)
    obs, infos = env.reset(seed=log.seed)
    by_turn: dict[int, list[Turn]] = {}
    for turn in log.turns:
        if turn.agent != MODERATOR:  # a game master's words: the env says them again
            by_turn.setdefault(turn.turn, []).append(turn)
    for index in sorted(by_turn):
        recorded = by_turn[index]
        acting = sorted(env.name_of(seat) for seat in env.agents if infos[seat]["acting"])  # the log keeps names
        if index != env.turn or sorted(t.agent for t in recorded) != acting:
            who, expected = ", ".join(t.agent for t in recorded), ", ".join(acting) or "nobody"
            raise ReplayError(
                f"episode {log.id}: turn {index} was played by {who} but the env expects {expected} at turn"
                f" {env.turn} (was it run with action order {config.action_order!r}?)"
            )
        for turn in recorded:
            yield turn, Observation.from_env(obs[env.seat_of(turn.agent)])
        actions = {seat: {"action_type": "none"} for seat in env.agents} | {
            env.seat_of(t.agent): t.action for t in recorded
        }
        obs, _, _, _, infos = env.step(actions)


def sample_examples(sample: Sample, config: EnvConfig | None = None, prompt: str = SOTOPIA) -> list[Example]:
    """The examples of one seat of one episode, in turn order, prompted as ``prompt`` prompts."""
    goal = sample.score("goal")
    return [
        Example(
            prompt=render_prompt(observation, prompt),
            completion=[{"role": "assistant", "content": turn.action.to_json()}],
            episode_id=sample.log.id,
            scenario_id=sample.scenario_id,
            seat=sample.seat,
            agent=sample.agent,
            turn=turn.turn,
            action_type=turn.action.action_type.value,
            goal=goal,
            prompt_name=prompt,
        )
        for turn, observation in replay(sample.log, config)
        if turn.agent == sample.agent
    ]


# -- filters on samples (one seat of one episode) ------------------------------------------------


def top1_per_scenario_role(samples: list[Sample]) -> list[Sample]:
    """SOTOPIA-pi: for each (scenario, seat), the one sample ranked best by (goal, overall).

    Ties go to the earlier episode (then the smaller id), so the choice is deterministic.
    """
    best: dict[tuple[str, int], Sample] = {}
    for s in sorted(samples, key=lambda s: (s.log.created_at, s.log.id)):
        key = (s.scenario_id, s.seat)
        if key not in best or (s.score("goal"), s.score("overall")) > (
            best[key].score("goal"),
            best[key].score("overall"),
        ):
            best[key] = s
    return [s for s in samples if best.get((s.scenario_id, s.seat)) is s]


def min_goal(threshold: float) -> SampleFilter:
    """Keep samples whose goal score is at least ``threshold``."""

    def keep(samples: list[Sample]) -> list[Sample]:
        return [s for s in samples if s.score("goal") >= threshold]

    return keep


def played_by(model: str) -> SampleFilter:
    """Keep the seats played by ``model`` (the spec string recorded in the episode)."""

    def keep(samples: list[Sample]) -> list[Sample]:
        return [s for s in samples if s.model == model]

    return keep


# -- filters on examples (one turn) -----------------------------------------------------------------


def drop_none(examples: list[Example]) -> list[Example]:
    """Drop turns where the agent did nothing."""
    return [e for e in examples if e.action_type != ActionType.none.value]


def balance_roles(seed: int = 0) -> ExampleFilter:
    """Downsample every seat to the smallest seat's example count (a seeded, order-keeping choice)."""
    import random

    def keep(examples: list[Example]) -> list[Example]:
        by_seat: dict[int, list[int]] = {}
        for i, e in enumerate(examples):
            by_seat.setdefault(e.seat, []).append(i)
        if len(by_seat) < 2:
            return examples
        n = min(len(ix) for ix in by_seat.values())
        rng = random.Random(seed)
        chosen = {i for seat in sorted(by_seat) for i in rng.sample(by_seat[seat], n)}
        return [e for i, e in enumerate(examples) if i in chosen]

    return keep


# -- the builder --------------------------------------------------------------------------------------


@dataclass
class FilterConfig:
    """Which filters a stage applies, in this order: top-1, goal threshold, drop ``none``, balance seats."""

    top1_per_scenario_role: bool = True
    min_goal: float | None = None
    drop_none: bool = True
    balance_roles: bool = False

    @property
    def uses_ratings(self) -> bool:
        """Whether a filter ranks or thresholds by rating (so unrated episodes cannot take part)."""
        return self.top1_per_scenario_role or self.min_goal is not None

    def build(self, seed: int = 0) -> tuple[list[SampleFilter], list[ExampleFilter]]:
        samples: list[SampleFilter] = []
        if self.top1_per_scenario_role:
            samples.append(top1_per_scenario_role)
        if self.min_goal is not None:
            samples.append(min_goal(self.min_goal))
        examples: list[ExampleFilter] = []
        if self.drop_none:
            examples.append(drop_none)
        if self.balance_roles:
            examples.append(balance_roles(seed))
        return samples, examples


def collect_examples(
    logs: Iterable[EpisodeLog],
    sample_filters: Sequence[SampleFilter] = (),
    example_filters: Sequence[ExampleFilter] = (),
    config: EnvConfig | None = None,
    keep_unrated: bool = False,
    prompt: str = SOTOPIA,
) -> tuple[list[Example], DatasetStats]:
    """Run the pipeline of the module docstring; the examples and the counts of each step.
    ``keep_unrated`` is for sample filters that do not look at ratings; ``prompt`` names the prompt
    (``sotopia_env.prompt.PROMPTS``) the examples are rendered with."""
    prompt_function(prompt)  # an unknown name: one line, before any replay
    logs = list(logs)
    refuse_test_split(logs)
    stats = DatasetStats(episodes=len(logs))
    kept = []
    for log in logs:
        if log.status == "failed":
            stats.skipped_failed += 1
        elif log.rating is None or log.rating.ratings is None:
            if keep_unrated:
                stats.unrated_kept += 1
                kept.append(log)
            else:
                stats.skipped_unrated += 1
        else:
            kept.append(log)
    samples = [Sample(log, seat) for log in kept for seat in range(len(log.agents))]
    stats.samples = len(samples)
    for sample_filter in sample_filters:
        samples = sample_filter(samples)
    stats.samples_kept = len(samples)
    examples = [e for s in samples for e in sample_examples(s, config, prompt)]
    stats.examples_replayed = len(examples)
    for example_filter in example_filters:
        examples = example_filter(examples)
    stats.examples = len(examples)
    for e in examples:
        stats.per_seat[e.seat] = stats.per_seat.get(e.seat, 0) + 1
    return examples, stats


def dataset_prompt(dataset: Any) -> str | None:
    """The prompt a dataset's rows were rendered in: its ``prompt_name`` column's one value (None without the
    column); ``ValueError`` for a dataset that mixes prompts, since a model is trained on one."""
    if "prompt_name" not in dataset.column_names:
        return None
    names = set(dataset["prompt_name"])
    if len(names) > 1:
        raise ValueError(f"the dataset mixes prompts ({', '.join(sorted(names))}); a model is trained on one")
    return names.pop() if names else None


def to_hf_dataset(examples: Sequence[Example]):
    """A ``datasets.Dataset`` with the columns of ``Example`` (prompt and completion are message lists)."""
    from datasets import Dataset

    return Dataset.from_list([e.to_row() for e in examples])


def build_dataset(
    logs: Iterable[EpisodeLog],
    sample_filters: Sequence[SampleFilter] = (),
    example_filters: Sequence[ExampleFilter] = (),
    config: EnvConfig | None = None,
    keep_unrated: bool = False,
    prompt: str = SOTOPIA,
):
    """``(datasets.Dataset, DatasetStats)``: ``collect_examples`` as a Hugging Face dataset."""
    examples, stats = collect_examples(logs, sample_filters, example_filters, config, keep_unrated, prompt)
    return to_hf_dataset(examples), stats
