"""The checks before playing that rule seats and the rule judge need: which seat, which scenarios."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sotopia_env.agents.specs import (
    BASELINE_SPECS,
    ORACLE_PLAYER,
    RULE_PARTNER,
    RULE_PLAYER,
    AgentSpec,
    AgentSpecError,
)
from sotopia_env.evaluators import VERIFIABLE
from sotopia_env.kinds import LEARNER_SEAT, PARTNER_SEAT, require_verifiable
from sotopia_env.profiles import Scenario
from sotopia_env.specs import EvaluatorSpec


def check_rule_specs(
    scenarios: Iterable[Scenario],
    agent_specs: Sequence[AgentSpec | str | None],
    evaluator: EvaluatorSpec | str,
) -> None:
    """Before playing: ``rule-partner`` only in seat 2 and on verifiable scenarios, a ``baseline-*`` only in seat 1
    and on verifiable scenarios, ``rule-player`` and ``oracle-player`` only on games,
    and the ``verifiable`` judge only on either. Raises ``NotVerifiable`` or ``AgentSpecError`` with one line.
    The specs are parsed here (strings) or taken as parsed; each is read by its ``kind``, not its text."""
    scenarios = list(scenarios)
    kinds = [None if spec is None else AgentSpec.parse(spec).kind for spec in agent_specs]  # None: no seat given
    seats = [i for i, kind in enumerate(kinds) if kind == RULE_PARTNER]
    if any(seat != PARTNER_SEAT for seat in seats):
        raise AgentSpecError(f"{RULE_PARTNER} plays seat {PARTNER_SEAT + 1} only: pass it as --agent2 (or --partner)")
    if seats:
        require_verifiable(scenarios, RULE_PARTNER)
    for seat, kind in enumerate(kinds):
        if kind in BASELINE_SPECS:
            if seat != LEARNER_SEAT:
                raise AgentSpecError(f"{kind} plays seat {LEARNER_SEAT + 1} only: pass it as --agent1 (or --model)")
            require_verifiable([s for s in scenarios if s.game is None], kind)
            if any(s.game is not None for s in scenarios):
                raise AgentSpecError(f"{kind} plays the verifiable kinds, not games (--scenarios verifiable)")
    for player in (RULE_PLAYER, ORACLE_PLAYER):
        if player not in kinds:
            continue
        for scenario in scenarios:
            if scenario.game is None:
                raise AgentSpecError(f"{player} plays games only, and {scenario.id!r} is not one (--scenarios game)")
    if EvaluatorSpec.parse(evaluator).key == VERIFIABLE:
        require_verifiable([s for s in scenarios if s.game is None], f"--evaluator {VERIFIABLE}")
