"""The exact judge of a game: the transcript replayed through the game master, and its outcome per player.

``VerifiableJudge`` (``--evaluator verifiable``) judges games through ``rate_game``. A game that did not reach
its end (an agent error cut it short) has no outcome: it is unrated with the reason, never scored 0.
"""

from __future__ import annotations

from sotopia_env.evaluation import AgentRating, DimensionScore, EpisodeContext, EpisodeRating
from sotopia_env.games.master import replay


def rate_game(context: EpisodeContext, evaluator: str) -> EpisodeRating:
    setup = context.setup
    game = setup.scenario.game
    if game is None:
        raise ValueError(f"scenario {setup.scenario.id!r} is not a game")
    master = replay(game, setup.agent_names, context.turns)
    outcome = master.outcome
    if outcome is None:
        why = context.termination_reason or "unfinished"
        return EpisodeRating(evaluator=evaluator, error=f"the game did not reach its end ({why}): no outcome to judge")
    counts = (
        f" Rounds: {outcome.cycles}; votes: {outcome.votes}; eliminated: {', '.join(outcome.eliminated) or 'nobody'}."
    )
    ratings = {
        name: AgentRating(
            scores={"goal": DimensionScore(score=outcome.goals[name], reasoning=outcome.reasoning + counts)},
            success=outcome.success[name],
        )
        for name in setup.agent_names
    }
    return EpisodeRating(evaluator=evaluator, ratings=ratings)
