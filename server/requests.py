"""What a client may ask the server to run, checked before a ``202`` promises it.

``SimulationRequest`` is the body of ``POST /api/simulations``. ``plan`` turns it into the episode the CLI's
``run`` would play (``seat_specs``, the scenario sampled by the seed, a game judged by its rules unless another
judge is named) and refuses, with one line naming the field, what the server will not do: an unknown scenario,
a spec count that fits no seat count, code agents (``module:Class``) unless the server allows them, a rule agent
where it cannot play, unknown dimensions, a model server (``api_base``) the operator did not list.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from sotopia_env.agents.loading import AgentSpecError, is_custom_spec
from sotopia_env.agents.rule_specs import check_rule_specs
from sotopia_env.backends.endpoints import ModelServers
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.job_fields import DEFAULT_MAX_TURNS, DEFAULT_MODEL, MaxTurns, Seed, Tag
from sotopia_env.evaluators import VERIFIABLE
from sotopia_env.library import Library, LibraryError
from sotopia_env.sampler import NoEligibleCharacters, sample_setup
from sotopia_env.server.allowed_servers import AllowedModelServers

HUMAN = "human"


class SimulationRequest(BaseModel):
    """One episode to simulate. ``agents``: one spec for every seat, or one per seat (``human``: a person plays
    that seat on its play page). ``api_base``: this simulation's model server (else the server's default); only
    servers the operator listed are accepted (``allowed_servers``)."""

    model_config = ConfigDict(extra="forbid")

    scenario: str | None = Field(None, description="Scenario id; default: sampled with the seed.")
    agents: list[str] = Field(default_factory=lambda: [DEFAULT_MODEL], min_length=1, max_length=8)
    evaluator: str = Field(DEFAULT_MODEL, description="An evaluator spec; a game defaults to its exact outcome.")
    dimensions: str = Field("sotopia", description="'sotopia', 'goal' or a comma list of dimension names.")
    max_turns: MaxTurns = DEFAULT_MAX_TURNS
    seed: Seed = 0
    tag: Tag = "serve"
    api_base: ModelServers | None = Field(None, description="Model servers (a URL, a comma list, or a list).")


class RequestRefused(ValueError):
    """A request the server will not run; the message is one line naming the field."""


@dataclass
class Plan:
    setup: EpisodeSetup
    specs: list[str]
    evaluator: str
    api_base: ModelServers | None = None  # the model servers its agents and judge call (from the allow-list)

    @property
    def human_seats(self) -> list[str]:
        return [name for name, spec in zip(self.setup.agent_names, self.specs, strict=True) if spec == HUMAN]


def plan(
    request: SimulationRequest,
    library: Library,
    allow_code_agents: bool = False,
    servers: AllowedModelServers = AllowedModelServers(),
) -> Plan:
    """The episode ``request`` asks for, or ``RequestRefused`` with one line naming the field."""
    try:
        api_base = servers.for_request(request.api_base)
    except ValueError as exc:
        raise RequestRefused(str(exc)) from None
    try:
        setup = sample_setup(library, seed=request.seed, scenario=request.scenario)
    except (LibraryError, NoEligibleCharacters) as exc:
        raise RequestRefused(f"scenario: {exc}") from None
    seats = setup.scenario.num_agents
    specs = [s.strip() for s in request.agents]
    if len(specs) == 1:
        specs = specs * seats
    if len(specs) != seats or not all(specs):
        raise RequestRefused(
            f"agents: {len(request.agents)} specs for {seats} seats (give one for all, or one per seat)"
        )
    code = [s for s in specs if is_custom_spec(s)]
    if code and not allow_code_agents:
        raise RequestRefused(f"agents: {code[0]!r} would load code; the server refuses it (serve --allow-code-agents)")
    evaluator = request.evaluator.strip()
    if setup.scenario.game is not None and evaluator == DEFAULT_MODEL:
        evaluator = VERIFIABLE  # as `run`: a game's outcome is exact
    try:
        check_rule_specs([setup.scenario], specs, evaluator)
    except (AgentSpecError, ValueError) as exc:
        raise RequestRefused(f"agents: {exc}") from None
    from sotopia_env.evaluators import dimensions_from_config

    try:
        dimensions_from_config(request.dimensions)
    except ValueError as exc:
        raise RequestRefused(f"dimensions: {exc}") from None
    return Plan(setup, specs, evaluator, api_base)
