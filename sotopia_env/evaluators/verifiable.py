"""``verifiable``: the exact judge of verifiable scenarios and games, through their rule sets.

The scenario's rule set (``sotopia_env.kinds.registry.rules_of``: its game's rules, else the kind of its hidden
facts) replays the transcript and gives each seat a goal and ``success`` (``RuleSet.judge``). Only the goal
dimension is rated (other SOTOPIA dimensions need an LLM judge). A scenario without hidden facts or a game is
unrated with a one-line error (``NotVerifiable``), and so is a game cut short: never a score of 0.
"""

from __future__ import annotations

from sotopia_env.evaluators.base import AgentRating, DimensionScore, EpisodeContext, EpisodeRating, SyncFromAsync
from sotopia_env.evaluators.dimensions import GOAL_ONLY, Dimension
from sotopia_env.kinds.registry import rule_sets, rules_of


class VerifiableJudge(SyncFromAsync):
    """The rule judge: the goal dimension, scored exactly from the transcript; ``success`` per agent."""

    name = "verifiable"

    def __init__(self, dimensions: tuple[Dimension, ...] = GOAL_ONLY) -> None:
        if "goal" not in {d.name for d in dimensions}:
            raise ValueError("the verifiable judge rates the goal dimension; include 'goal' in --dimensions")
        self.dimensions = GOAL_ONLY

    @property
    def rule_modules(self) -> tuple[str, ...]:
        """The modules whose source decides its scores (a protocol card's ``judge_sha256``): this one, the
        shared replay, and every registered rule set's."""
        shared = {__name__, "sotopia_env.kinds.base", "sotopia_env.games.master", "sotopia_env.games.teams"}
        return tuple(sorted(shared | {type(r).__module__ for r in rule_sets()}))

    async def aevaluate(self, context: EpisodeContext) -> EpisodeRating:
        rules, section = rules_of(context.setup.scenario)
        verdict = rules.judge(section, context.setup.agent_names, context.turns, context.termination_reason)
        if verdict.error is not None:
            return EpisodeRating(evaluator=self.name, error=verdict.error)
        ratings = {
            name: AgentRating(
                scores={"goal": DimensionScore(score=goal, reasoning=verdict.reasoning)},
                success=verdict.success[name],
            )
            for name, goal in verdict.goals.items()
        }
        return EpisodeRating(evaluator=self.name, ratings=ratings)
