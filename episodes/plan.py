"""One planner: the spec a run is described by, and the one function that turns it into the episodes to play.

Two specs describe what to play, each validated once where it enters (a command's options, an HTTP body, a queued
record) and passed on unchanged:

- ``RunSpec``: one episode. ``sotopia-env run`` parses its options into one, and ``POST /api/simulations`` takes
  one as its body (``server.requests.SimulationRequest``, the same fields held to JSON's types).
- ``episodes.benchmark.BenchmarkSpec``: a model against a partner on a scenario set. ``sotopia-env benchmark``
  parses its options into one, and ``POST /api/benchmarks`` takes one as its body.

``plan_episodes`` turns either into an ``EpisodePlan``: the scenarios, the jobs (one spec per seat: ``seat_specs``
expands a spec's agents over a scenario's seats), the judge each gets (a game is judged by its rules unless another
judge is named: ``judge_for``), and how its agents and judge are built (``agents_of``, ``judge_of``). The CLI, the
server's simulations and its benchmarks all play what it returns; ``service_parties`` picks the agents and judge
whose model services a preflight must reach.

Messages name a spec's fields; planned with ``flags=True`` (validated with ``context={"flags": True}``) they name
the CLI's options instead (``--agents``, not ``agents``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from sotopia_env.backends.endpoints import ModelServers
from sotopia_env.episodes.job_fields import DEFAULT_MAX_TURNS, DEFAULT_MODEL, MaxTurns, Seed, Tag
from sotopia_env.profiles import MAX_SEATS

if TYPE_CHECKING:
    from sotopia_env.agents.base import Agent
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.env import EnvConfig
    from sotopia_env.episode_setup import EpisodeSetup
    from sotopia_env.episodes.runner import AgentFactory, Job
    from sotopia_env.episodes.store import EpisodeStore
    from sotopia_env.evaluators import Evaluator
    from sotopia_env.library import Library
    from sotopia_env.profiles import Scenario

SPEC_CHARS = 500  # a model, agent or evaluator spec
VERIFIABLE = "verifiable"  # the exact judge (``evaluators.VERIFIABLE``)
HUMAN = "human"  # a person plays the seat (the server's play page, the terminal)
AgentSpecText = Annotated[str, Field(min_length=1, max_length=SPEC_CHARS, pattern=r"\S")]


def option_name(name: str, info: ValidationInfo | bool | None) -> str:
    """A field as the user named it: ``max_turns`` in a body, ``--max-turns`` on the command line (``info``: the
    validation's info, whose context says ``flags``, or the flag itself)."""
    flags = info if isinstance(info, bool) else info is not None and (info.context or {}).get("flags")
    return f"--{name.replace('_', '-')}" if flags else name


class SeatsMismatch(ValueError):
    """A spec's agents fit no seat count of the scenario it plays (the message names the field)."""


class PlannedSpec(Protocol):
    """What the planner reads of a spec: ``RunSpec`` here, ``episodes.benchmark.BenchmarkSpec`` (which imports this
    module, never the other way round); each plans its own episodes (``plan``)."""

    evaluator: str
    dimensions: str
    max_turns: int
    api_base: ModelServers | None

    def agent_options(self) -> dict[str, Any]: ...

    def plan(self, library: Library, store: EpisodeStore | None = None, *, flags: bool = False) -> EpisodePlan: ...


class RunSpec(BaseModel):
    """One episode (see the module docstring): the scenario (or the seed that samples one), an agent spec per seat,
    the judge, the turn limit, the seed, the tag and the model servers."""

    model_config = ConfigDict(extra="forbid")

    scenario: str | None = Field(None, max_length=200, description="Scenario id; default: sampled with the seed.")
    agents: list[AgentSpecText] = Field(
        default_factory=lambda: [DEFAULT_MODEL],
        min_length=1,
        max_length=MAX_SEATS,
        description="Agent specs: one for every seat, or one per seat ('human': a person plays that seat; "
        "'rule-player' plays a game by its rules). With 'partner': the first seats.",
    )
    partner: AgentSpecText | None = Field(
        None, description="Plays every seat after the ones 'agents' names (the CLI's --agent2)."
    )
    evaluator: AgentSpecText = Field(
        DEFAULT_MODEL, description="An evaluator spec; a game defaults to its exact outcome."
    )
    dimensions: str = Field(
        "sotopia",
        max_length=2000,
        description="'sotopia', or a comma list of dimension names ('goal': the goal alone).",
    )
    max_turns: MaxTurns = DEFAULT_MAX_TURNS
    seed: Seed = 0
    tag: Tag = "run"
    api_base: ModelServers | None = Field(None, description="Model servers (a URL, a comma list, or a list).")

    @field_validator("agents")
    @classmethod
    def _strip_agents(cls, value: list[str]) -> list[str]:
        return [spec.strip() for spec in value]

    @field_validator("partner", "evaluator")
    @classmethod
    def _strip(cls, value: str | None) -> str | None:
        return value.strip() if value is not None else None

    @field_validator("dimensions")
    @classmethod
    def _known_dimensions(cls, value: str) -> str:
        from sotopia_env.evaluators import dimensions_from_config

        dimensions_from_config(value)
        return value

    def seat_specs(self, seats: int, flags: bool = False) -> list[str]:
        """One agent spec per seat of a ``seats``-seat scenario: ``agents`` (one for all, or one per seat), or with
        ``partner`` the seats ``agents`` names first and ``partner`` in every other; else ``SeatsMismatch``."""
        given, field = list(self.agents), option_name("agents", flags)
        if self.partner is not None and len(given) <= seats:
            return given + [self.partner] * (seats - len(given))
        if self.partner is None and len(given) == 1:
            return given * seats
        if len(given) != seats:
            raise SeatsMismatch(f"{field}: {len(given)} specs for {seats} seats (give one for all, or one per seat)")
        return given

    def plan(self, library: Library, store: EpisodeStore | None = None, *, flags: bool = False) -> EpisodePlan:
        """Its one episode (``plan_episodes``; ``store`` is not read)."""
        from sotopia_env.agents.rule_specs import check_rule_specs
        from sotopia_env.episodes.runner import Job
        from sotopia_env.sampler import sample_setup

        setup = sample_setup(library, seed=self.seed, scenario=self.scenario)
        specs = self.seat_specs(setup.scenario.num_agents, flags)
        evaluator = judge_for([setup.scenario], self.evaluator)
        check_rule_specs([setup.scenario], specs, evaluator)
        return EpisodePlan(self, [setup.scenario], [Job(setup, specs, seed=self.seed)], evaluator)

    def agent_options(self) -> dict[str, Any]:
        """What its agents are built with (``agents.loading.load_agent``): chat sampling seeded by the spec."""
        from sotopia_env.agents.llm import CHAT_SETTINGS
        from sotopia_env.backends.base import GenerationSettings

        settings: GenerationSettings = GenerationSettings(seed=self.seed, **CHAT_SETTINGS)
        return {"settings": settings, "api_base": self.api_base}


def judge_for(scenarios: Iterable[Scenario], evaluator: str) -> str:
    """The judge an episode of ``scenarios`` gets: a game's outcome is exact, so a game is judged by its rules
    (``verifiable``) unless another judge than the default is named."""
    if evaluator == DEFAULT_MODEL and any(s.game is not None for s in scenarios):
        return VERIFIABLE
    return evaluator


@dataclass
class EpisodePlan:
    """What a spec plays: the scenarios, the jobs (a setup and one agent spec per seat each), the judge's spec, and
    the builders of its agents and judge. A ``RunSpec``'s plan has one job (``setup``, ``specs``)."""

    spec: PlannedSpec
    scenarios: list[Scenario]
    jobs: list[Job]
    evaluator: str  # the judge's spec (a game's run: ``verifiable`` unless another judge is named)

    @property
    def api_base(self) -> ModelServers | None:
        return self.spec.api_base

    @property
    def setup(self) -> EpisodeSetup:
        return self.jobs[0].setup

    @property
    def specs(self) -> list[str]:
        return self.jobs[0].agent_specs

    @property
    def human_seats(self) -> list[str]:
        return [name for name, spec in zip(self.setup.agent_names, self.specs, strict=True) if spec == HUMAN]

    def config(self) -> EnvConfig:
        from sotopia_env.env import EnvConfig

        return EnvConfig(max_turns=self.spec.max_turns)

    def agents(self) -> AgentFactory:
        return agents_of(self.spec)

    def judge(self) -> Evaluator | None:
        return judge_of(self.spec, self.evaluator)

    def seated(self, job: Job | None = None, seat: Callable[[str, str], Agent | None] | None = None) -> list[Agent]:
        """The agents of ``job`` (default: the first), one per seat; ``seat(name, spec)`` may seat one itself (a
        person's seat), else it is built from its spec."""
        job = job or self.jobs[0]
        make = self.agents()
        built = []
        for i, (name, spec) in enumerate(zip(job.setup.agent_names, job.agent_specs, strict=True)):
            own = seat(name, spec) if seat is not None else None
            built.append(own if own is not None else make(spec, i))
        return built

    def service_parties(self) -> list[Any]:
        """The agents and the judge of this plan that call a model service (built, not run): a preflight's list."""
        specs = [spec for job in self.jobs for spec in job.agent_specs]
        make = self.agents()
        return service_parties(specs, self.evaluator, lambda spec: make(spec, 0), self.judge)


def agents_of(spec: PlannedSpec) -> AgentFactory:
    """The agents of a spec's episodes, built where they play (a Ray actor calls this itself)."""
    from sotopia_env.episodes.runner import default_agent_factory

    return default_agent_factory(**spec.agent_options())


def judge_of(spec: PlannedSpec, evaluator: str | None = None) -> Evaluator | None:
    """The judge of a spec's episodes: ``evaluator`` (default: the spec's) on the spec's dimensions and servers."""
    from sotopia_env.evaluators import make_evaluator

    return make_evaluator(evaluator if evaluator is not None else spec.evaluator, spec.dimensions, spec.api_base)


def calls_a_model(spec: str) -> bool:
    """Whether an agent or a judge of ``spec`` may call a model (a rule agent, a human seat, a registered judge
    and ``none`` do not)."""
    from sotopia_env.agents.loading import NO_MODEL_SPECS
    from sotopia_env.evaluators import evaluator_names

    return spec.strip().lower() not in {*NO_MODEL_SPECS, "none", *evaluator_names()}


def service_parties(
    agents: Iterable[str], evaluator: str, build_agent: Callable[[str], Any], build_judge: Callable[[], Any]
) -> list[Any]:
    """The agents (one per distinct spec) and the judge that call a model service, built with ``build_agent`` and
    ``build_judge``; local models (they load where they play), human seats, rule agents and judges are left out."""
    from sotopia_env.backends.resolve import is_local_spec

    remote = [s for s in dict.fromkeys(agents) if calls_a_model(s) and not is_local_spec(s)]
    parties: list[Any] = [build_agent(spec) for spec in remote]
    if calls_a_model(evaluator) and not is_local_spec(evaluator):
        parties.append(build_judge())
    return parties


def plan_episodes(
    spec: PlannedSpec, library: Library, store: EpisodeStore | None = None, *, flags: bool = False
) -> EpisodePlan:
    """The episodes ``spec`` asks for (``spec.plan``). A ``RunSpec``: its scenario (else one sampled by its seed,
    with characters for its seats), its agents over the seats, the judge a game needs. A ``BenchmarkSpec``: the
    scenarios it selects, or with ``protocol`` the character pairings of SOTOPIA's episodes in ``store``, each with
    the model in each seat in turn. Raises a ``ValueError`` with one line when there is nothing to play:
    ``LibraryError`` (an unknown scenario), ``NoEligibleCharacters``, ``SeatsMismatch``, ``AgentSpecError`` (a rule
    agent where it cannot play), ``ProtocolNotImported``. ``flags``: messages name the CLI's options."""
    return spec.plan(library, store, flags=flags)
