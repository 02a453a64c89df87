"""Where seat sessions start: a ``SeatRow`` names the scenario, the seat, the seed, the partners and the judge, and
``open_session`` turns one into a ``SeatSession``. ``seat_rows(selector)`` builds the rows of a scenario selector
(``verifiable:train``, ``game:train``, ``hard``, ...), as ``EpisodeGRPOConfig.scenarios`` selects group starts.

The defaults follow the family: a verifiable scenario is played from seat 1 against the rule partner and judged
exactly (``verifiable``); a game from every seat against rule players, judged by its rules (``verifiable``); a
SOTOPIA scenario from both seats against ``partner`` and judged by ``judge`` (an LLM judge spec, required there).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.agents.base import Agent
from sotopia_env.agents.loading import NO_MODEL_SPECS, RULE_PARTNER, RULE_PLAYER, load_agent
from sotopia_env.backends.endpoints import ApiBase, ModelServers
from sotopia_env.env import EnvConfig
from sotopia_env.errors import UserError
from sotopia_env.evaluators import VERIFIABLE, Evaluator, make_evaluator
from sotopia_env.library import Library, load_library
from sotopia_env.limits import DEFAULT_MAX_TURNS
from sotopia_env.profiles import Scenario
from sotopia_env.prompt import SOTOPIA
from sotopia_env.sampler import sample_setup
from sotopia_env.training.seat_session import BackgroundLoop, SeatSession

RULE_AGENTS = tuple(sorted(NO_MODEL_SPECS - {"human"}))  # partners that need no stand-in: they call no model
SELF = "self"  # a partner spec for self-play rollouts: the policy being trained drives that seat too


class SeatRowError(UserError, ValueError):
    """A row or selector that names no playable seat; the message says which."""


class SeatRow(BaseModel):
    """One episode start for a policy in one seat (a dataset row: TRL passes its columns to ``reset``)."""

    model_config = ConfigDict(extra="ignore")  # a dataset row carries other columns too (TRL's ``prompt``)

    scenario: str
    seat: int = Field(0, ge=0)
    seed: int = 0
    partners: list[str] = Field(min_length=1)  # one agent spec per other seat, in seat order, or one for all
    evaluator: str = VERIFIABLE  # the judge: 'verifiable' (exact), or a model spec (an LLM judge)
    max_turns: int = Field(DEFAULT_MAX_TURNS, ge=1)
    dense_reward: float = Field(0.0, ge=0.0)  # verifiable only: partial credit up to this much (episode GRPO's)

    def partner_specs(self, seats: int) -> list[str]:
        if len(self.partners) == 1:
            return self.partners * (seats - 1)
        if len(self.partners) != seats - 1:
            raise SeatRowError(
                f"row {self.scenario!r}: {len(self.partners)} partner specs for {seats - 1} other seats (give one or "
                f"{seats - 1})"
            )
        return list(self.partners)

    def seat_specs(self, seats: int) -> list[str]:
        """Every seat's spec in seat order, the row's own seat ``SELF`` (the policy)."""
        others = iter(self.partner_specs(seats))
        return [SELF if s == self.seat else next(others) for s in range(seats)]

    def driven_seats(self, seats: int) -> list[int]:
        """The seats the policy drives in this row's episode: the row's seat, then every ``SELF`` partner's."""
        specs = self.seat_specs(seats)
        return [self.seat, *(s for s, spec in enumerate(specs) if spec == SELF and s != self.seat)]


def _family(scenario: Scenario) -> str:
    return "game" if scenario.game is not None else "verifiable" if scenario.verifiable is not None else "sotopia"


def seat_rows(
    selector: str,
    seeds: int | Sequence[int] = 1,
    partner: str | None = None,
    judge: str | None = None,
    seats: Sequence[int] | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    dense_reward: float = 0.0,
    library: Library | None = None,
) -> list[SeatRow]:
    """One row per scenario the selector picks, per seat, per seed (``seeds``: a count from 0, or the seeds).

    ``partner``: every other seat's agent spec (default: ``rule-partner`` on verifiable scenarios, ``rule-player``
    on games; required on SOTOPIA scenarios). ``judge``: the LLM judge of SOTOPIA scenarios (verifiable scenarios
    and games are judged exactly). ``seats``: the policy's seats (default: seat 1 on verifiable scenarios, every
    seat elsewhere)."""
    library = library or load_library()
    scenarios = sorted(library.select(selector), key=lambda s: s.id)
    if not scenarios:
        raise SeatRowError(f"no scenarios match {selector!r}")
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    rows = []
    for scenario in scenarios:
        family = _family(scenario)
        their_partner = partner or {"verifiable": RULE_PARTNER, "game": RULE_PLAYER}.get(family)
        evaluator = VERIFIABLE if family != "sotopia" else judge
        if their_partner is None or evaluator is None:
            missing = "partner" if their_partner is None else "judge"
            raise SeatRowError(f"scenario {scenario.id!r} is a SOTOPIA scenario: give a {missing} (an agent spec)")
        chosen = list(seats) if seats is not None else [0] if family == "verifiable" else range(scenario.num_agents)
        for seat in chosen:
            if seat >= scenario.num_agents:
                raise SeatRowError(f"scenario {scenario.id!r} has no seat {seat + 1}")
            rows += [
                SeatRow(
                    scenario=scenario.id,
                    seat=seat,
                    seed=seed,
                    partners=[their_partner],
                    evaluator=evaluator,
                    max_turns=max_turns,
                    dense_reward=dense_reward,
                )
                for seed in seed_list
            ]
    return rows


def _passing() -> Agent:
    from sotopia_env.agents.scripted import ScriptedAgent

    return ScriptedAgent([], after=AgentAction(action_type=ActionType.none))


class SessionMaker:
    """Opens sessions from rows: one library, one evaluator per judge spec (its backend shared by every session)."""

    def __init__(self, library: Library | None = None, api_base: ApiBase = None, prompt: str = SOTOPIA) -> None:
        self.library = library or load_library()
        self.prompt = prompt  # the policy's prompt (``prompt_for_model`` of it): what an LLMAgent of it would see
        self.api_base = ModelServers.parse(api_base)  # parsed once; every partner and judge gets this value
        self._judges: dict[str, Evaluator | None] = {}

    def judge(self, spec: str) -> Evaluator | None:
        if spec not in self._judges:
            self._judges[spec] = make_evaluator(spec, "goal", self.api_base)
        return self._judges[spec]

    def open(self, row: SeatRow | dict, stand_ins: bool = False) -> SeatSession:
        """A session for ``row`` (not started). ``stand_ins``: partners that are not rule agents pass instead of
        playing (to read a seat's opening prompt without calling a model). A self-play row (a ``SELF`` partner)
        opens with ``open_together``, except with ``stand_ins``."""
        sessions = self.open_together(row, stand_ins)
        if len(sessions) > 1 and not stand_ins:
            raise SeatRowError(f"row {_row(row).scenario!r} is a self-play row: open it with open_together")
        return sessions[0]

    def open_together(self, row: SeatRow | dict, stand_ins: bool = False) -> list[SeatSession]:
        """The sessions of one episode of ``row``'s start, one per seat the policy drives (``driven_seats``: the
        row's seat first, then each ``SELF`` partner's seat), not started. Without a ``SELF`` partner: one."""
        row = _row(row)
        try:
            setup = sample_setup(self.library, seed=row.seed, scenario=row.scenario)
        except Exception as exc:
            raise SeatRowError(f"row {row.scenario!r}: {exc}") from None
        seats = setup.scenario.num_agents
        specs = row.seat_specs(seats)
        driven = [row.seat] if stand_ins else row.driven_seats(seats)
        if len(driven) > 1 and _family(setup.scenario) == "verifiable":
            raise SeatRowError(
                f"row {row.scenario!r}: a verifiable scenario is played against its rule partner (it holds the hidden "
                "type); self-play is for SOTOPIA scenarios and games"
            )
        partners = [
            _passing() if stand_ins and spec not in RULE_AGENTS else load_agent(spec, api_base=self.api_base)
            for s, spec in enumerate(specs)
            if s not in driven
        ]
        return SeatSession.together(
            setup,
            driven,
            partners,
            self.judge(row.evaluator),
            config=EnvConfig(max_turns=row.max_turns),
            seed=row.seed,
            specs=["policy" if spec == SELF else spec for spec in specs],
            dense_reward=row.dense_reward,
            prompt=self.prompt,
        )

    def opening_system(self, row: SeatRow | dict, loop: BackgroundLoop | None = None) -> str:
        """The system message of the seat's first prompt (what stays the same between its moves)."""
        session = self.open(row, stand_ins=True)
        turn = (loop or BackgroundLoop.shared()).run(session.start())
        session.close()
        return turn.messages[0]["content"]


def _row(row: SeatRow | dict) -> SeatRow:
    return row if isinstance(row, SeatRow) else SeatRow.model_validate(row)


def trl_dataset(rows: Sequence[SeatRow], maker: SessionMaker | None = None):
    """A ``datasets.Dataset`` for ``GRPOTrainer(environment_factory=...)``: the rows' columns, plus ``prompt``, the
    seat's system message and an empty user message that the environment's ``reset`` fills with the opening."""
    from datasets import Dataset

    maker = maker or SessionMaker()
    records = []
    for row in rows:
        system = maker.opening_system(row)
        prompt = [{"role": "system", "content": system}, {"role": "user", "content": ""}]
        records.append({**row.model_dump(), "prompt": prompt})
    return Dataset.from_list(records)
