"""What a client may ask the server to run, checked before a ``202`` promises it.

``SimulationRequest`` is the body of ``POST /api/simulations``: the CLI's own ``episodes.plan.RunSpec``, held to
JSON's types; its schema carries every rule a schema can say (patterns, lengths, the dimension names), so that what
the OpenAPI document allows is what the server takes. ``plan`` applies the server's policy, then turns it into the
episode the CLI's ``run`` would play with the one planner (``episodes.plan.plan_episodes``: the agents over the
seats, the scenario sampled by the seed, a game judged by its rules unless another judge is named), and refuses,
with one line naming the field, what the server will not do, each with its status (``RequestRefused.status``):

- 403 (``NotAllowed``): what the operator did not allow: code agents (``module:Class``) without
  ``--allow-code-agents``, a model server (``api_base``, or a provider's default endpoint) it did not list;
- 404 (``NotFound``): a scenario the library lacks;
- 409 (``Conflict``): a request that does not fit the scenario it names: a spec count that fits no seat count, a
  rule agent where it cannot play, a scenario whose seats no character may take.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, model_validator

from sotopia_env.agents.loading import AgentSpecError, is_custom_spec
from sotopia_env.backends.endpoints import ModelServers
from sotopia_env.episodes.benchmark import BenchmarkSpec
from sotopia_env.episodes.job_fields import Tag
from sotopia_env.episodes.plan import EpisodePlan, RunSpec, SeatsMismatch, plan_episodes
from sotopia_env.evaluators.dimensions import SOTOPIA_DIMENSIONS
from sotopia_env.library import Library, LibraryError
from sotopia_env.sampler import NoEligibleCharacters
from sotopia_env.server.allowed_servers import AllowedModelServers, NotListed

_NAMES = "|".join(d.name for d in SOTOPIA_DIMENSIONS)
DIMENSIONS_PATTERN = rf"^(sotopia|({_NAMES})(,({_NAMES}))*)$"  # 'goal' is one of the names
SCENARIO_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"  # as ``profiles.Scenario.id``


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


class SimulationRequest(RunSpec):
    """One episode to simulate: the CLI's ``run`` spec (``episodes.plan.RunSpec``), held to JSON's types.
    ``agents``: one spec for every seat, or one per seat (``human``: a person plays that seat on its play page).
    ``api_base``: this simulation's model server (else the server's default); only servers the operator listed are
    accepted (``allowed_servers``)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # JSON's types, as the schema says: no "5" for 5

    scenario: str | None = Field(
        None, max_length=200, pattern=SCENARIO_ID_PATTERN, description="Scenario id; default: sampled with the seed."
    )
    dimensions: str = Field(
        "sotopia",
        max_length=2000,
        pattern=DIMENSIONS_PATTERN,
        description="'sotopia', or a comma list of dimension names ('goal': the goal alone).",
    )
    tag: Tag = "serve"

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


Plan = EpisodePlan  # a simulation's plan: ``setup``, ``specs`` (one per seat), ``evaluator``, ``human_seats``


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
    agents = {"agents": list(request.agents)} | ({"partner": [request.partner]} if request.partner else {})
    check_code(agents, allow_code_agents, code_refused)
    check_servers(agents | {"evaluator": [request.evaluator]}, servers, api_base)
    try:
        return plan_episodes(request.model_copy(update={"api_base": api_base}), library)
    except LibraryError as exc:
        raise NotFound(f"scenario: {exc}") from None
    except NoEligibleCharacters as exc:
        raise Conflict(f"scenario: {exc}") from None
    except SeatsMismatch as exc:  # names the field itself
        raise Conflict(str(exc)) from None
    except (AgentSpecError, ValueError) as exc:  # a rule agent where it cannot play
        raise Conflict(f"agents: {exc}") from None
