"""What a client may ask the server to run, checked before a ``202`` promises it.

``SimulationRequest`` is the body of ``POST /api/simulations``; its schema carries every rule a schema can say
(patterns, lengths, the dimension names), so that what the OpenAPI document allows is what the server takes.
``plan`` turns it into the episode the CLI's ``run`` would play (``seat_specs``, the scenario sampled by the seed,
a game judged by its rules unless another judge is named) and refuses, with one line naming the field, what the
server will not do, each with its status (``RequestRefused.status``):

- 403 (``NotAllowed``): what the operator did not allow: code agents (``module:Class``) without
  ``--allow-code-agents``, a model server (``api_base``, or a provider's default endpoint) it did not list;
- 404 (``NotFound``): a scenario the library lacks;
- 409 (``Conflict``): a request that does not fit the scenario it names: a spec count that fits no seat count, a
  rule agent where it cannot play, a scenario whose seats no character may take.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sotopia_env.agents.loading import AgentSpecError, is_custom_spec
from sotopia_env.agents.rule_specs import check_rule_specs
from sotopia_env.backends.endpoints import ModelServers
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.benchmark import BenchmarkSpec
from sotopia_env.episodes.job_fields import DEFAULT_MAX_TURNS, DEFAULT_MODEL, MaxTurns, Seed, Tag
from sotopia_env.evaluators import VERIFIABLE
from sotopia_env.evaluators.dimensions import SOTOPIA_DIMENSIONS
from sotopia_env.library import Library, LibraryError
from sotopia_env.sampler import NoEligibleCharacters, sample_setup
from sotopia_env.server.allowed_servers import AllowedModelServers, NotListed

HUMAN = "human"
SPEC_CHARS = 500
_NAMES = "|".join(d.name for d in SOTOPIA_DIMENSIONS)
DIMENSIONS_PATTERN = rf"^(sotopia|({_NAMES})(,({_NAMES}))*)$"  # 'goal' is one of the names
SCENARIO_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"  # as ``profiles.Scenario.id``
Spec = Annotated[str, Field(min_length=1, max_length=SPEC_CHARS, pattern=r"\S")]


MAX_NESTING = 100  # levels of lists and objects a body may have: none of ours needs more than a few


def whole_numbers(value: Any, depth: int = 0) -> Any:
    """``value`` (parsed JSON) with its integral floats as ints: JSON Schema's ``integer`` takes ``69.0``, a strict
    pydantic ``int`` does not (and a lax one would also take ``"69"``, which the schema refuses). ``ValueError``
    for a value nested deeper than ``MAX_NESTING`` (a 422, never the interpreter's recursion limit)."""
    if depth > MAX_NESTING:
        raise ValueError(f"the body is nested deeper than {MAX_NESTING} levels")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: whole_numbers(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v, depth + 1) for v in value]
    return value


class SimulationRequest(BaseModel):
    """One episode to simulate. ``agents``: one spec for every seat, or one per seat (``human``: a person plays
    that seat on its play page). ``api_base``: this simulation's model server (else the server's default); only
    servers the operator listed are accepted (``allowed_servers``)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # JSON's types, as the schema says: no "5" for 5

    scenario: str | None = Field(
        None, max_length=200, pattern=SCENARIO_ID_PATTERN, description="Scenario id; default: sampled with the seed."
    )
    agents: list[Spec] = Field(default_factory=lambda: [DEFAULT_MODEL], min_length=1, max_length=8)
    evaluator: Spec = Field(DEFAULT_MODEL, description="An evaluator spec; a game defaults to its exact outcome.")
    dimensions: str = Field(
        "sotopia",
        max_length=2000,
        pattern=DIMENSIONS_PATTERN,
        description="'sotopia', or a comma list of dimension names ('goal': the goal alone).",
    )
    max_turns: MaxTurns = DEFAULT_MAX_TURNS
    seed: Seed = 0
    tag: Tag = "serve"
    api_base: ModelServers | None = Field(None, description="Model servers (a URL, a comma list, or a list).")

    @model_validator(mode="before")
    @classmethod
    def _whole_numbers(cls, value: Any) -> Any:
        return whole_numbers(value)


class BenchmarkRequest(BenchmarkSpec):
    """The body of ``POST /api/benchmarks``: the CLI's own ``BenchmarkSpec``, held to JSON's types as its schema
    says (no ``"5"`` for 5, no ``true`` for 1)."""

    model_config = ConfigDict(strict=True)

    @model_validator(mode="before")
    @classmethod
    def _whole_numbers(cls, value: Any) -> Any:
        return whole_numbers(value)


class RequestRefused(ValueError):
    """A request the server will not run; the message is one line naming the field, ``status`` its answer."""

    status = 422


class NotAllowed(RequestRefused):
    """What the operator did not allow (code agents, a model server it did not list)."""

    status = 403


class NotFound(RequestRefused):
    """A scenario (or another entry) the library lacks."""

    status = 404


class Conflict(RequestRefused):
    """A request that does not fit the scenario it names (its seats, its rules, its characters)."""

    status = 409


@dataclass
class Plan:
    setup: EpisodeSetup
    specs: list[str]
    evaluator: str
    api_base: ModelServers | None = None  # the model servers its agents and judge call (from the allow-list)

    @property
    def human_seats(self) -> list[str]:
        return [name for name, spec in zip(self.setup.agent_names, self.specs, strict=True) if spec == HUMAN]


CODE_REFUSED = "this server refuses it (serve --allow-code-agents)"


def check_code(fields: dict[str, list[str]], allow_code_agents: bool, why: str = CODE_REFUSED) -> None:
    """``NotAllowed`` for the first spec that would load code (``module:Class``) unless code agents are allowed;
    ``why``: the end of its message."""
    for field, specs in fields.items():
        code = [s for s in specs if is_custom_spec(s)]
        if code and not allow_code_agents:
            raise NotAllowed(f"{field}: {code[0]!r} would load code; {why}")


def check_servers(fields: dict[str, list[str]], servers: AllowedModelServers, api_base: ModelServers | None) -> None:
    """``NotAllowed`` for the first spec that would reach a model server the operator did not list."""
    try:
        for field, specs in fields.items():
            for spec in dict.fromkeys(specs):
                servers.check_spec(field, spec, api_base)
    except NotListed as exc:
        raise NotAllowed(str(exc)) from None


def plan(
    request: SimulationRequest,
    library: Library,
    allow_code_agents: bool = False,
    servers: AllowedModelServers = AllowedModelServers(),
    code_refused: str = CODE_REFUSED,
) -> Plan:
    """The episode ``request`` asks for, or ``RequestRefused`` (one line naming the field, and its status);
    ``code_refused``: why code agents are refused, when they are."""
    try:
        api_base = servers.for_request(request.api_base)
    except NotListed as exc:
        raise NotAllowed(str(exc)) from None
    specs = [s.strip() for s in request.agents]
    evaluator = request.evaluator.strip()
    check_code({"agents": specs}, allow_code_agents, code_refused)
    check_servers({"agents": specs, "evaluator": [evaluator]}, servers, api_base)
    try:
        setup = sample_setup(library, seed=request.seed, scenario=request.scenario)
    except LibraryError as exc:
        raise NotFound(f"scenario: {exc}") from None
    except NoEligibleCharacters as exc:
        raise Conflict(f"scenario: {exc}") from None
    seats = setup.scenario.num_agents
    if len(specs) == 1:
        specs = specs * seats
    if len(specs) != seats:
        raise Conflict(f"agents: {len(request.agents)} specs for {seats} seats (give one for all, or one per seat)")
    if setup.scenario.game is not None and evaluator == DEFAULT_MODEL:
        evaluator = VERIFIABLE  # as `run`: a game's outcome is exact
    try:
        check_rule_specs([setup.scenario], specs, evaluator)
    except (AgentSpecError, ValueError) as exc:
        raise Conflict(f"agents: {exc}") from None
    return Plan(setup, specs, evaluator, api_base)
