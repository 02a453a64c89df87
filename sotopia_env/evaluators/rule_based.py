"""``rule-based``: a deterministic evaluator for tests and offline smoke runs, not a judge of quality."""

from __future__ import annotations

from sotopia_env.actions import ActionType
from sotopia_env.evaluators.base import EpisodeContext, EpisodeRating, SyncFromAsync, validate_scores
from sotopia_env.evaluators.dimensions import SOTOPIA_DIMENSIONS, Dimension


class RuleBasedEvaluator(SyncFromAsync):
    """A deterministic evaluator for tests and offline smoke runs, not a judge of quality.

    Each agent scores by simple transcript counts: ``goal`` = 2 per turn it spoke
    (capped at the range), ``believability`` = the top of the range unless it
    never spoke, and every other dimension the value nearest 0 in its range.
    """

    name = "rule-based"

    def __init__(self, dimensions: tuple[Dimension, ...] = SOTOPIA_DIMENSIONS) -> None:
        self.dimensions = tuple(dimensions)

    async def aevaluate(self, context: EpisodeContext) -> EpisodeRating:
        ratings = {}
        for name in context.setup.agent_names:
            spoke = sum(1 for t in context.turns if t.agent == name and t.action.action_type is ActionType.speak)
            raw = {}
            for dim in self.dimensions:
                if dim.name == "goal":
                    value = min(dim.high, dim.low + 2 * spoke)
                elif dim.name == "believability":
                    value = dim.high if spoke else dim.low
                else:
                    value = min(max(0, dim.low), dim.high)
                raw[dim.name] = {"score": value, "reasoning": f"{name} spoke {spoke} times"}
            ratings[name] = validate_scores(raw, self.dimensions, name)
        return EpisodeRating(evaluator=self.name, ratings=ratings)
