"""Custom agents loaded by ``module:Class`` spec in tests (this folder is on sys.path under pytest)."""

import asyncio

from sotopia_env.actions import AgentAction
from sotopia_env.agents.llm import LLMAgent
from sotopia_env.observation import Observation


class PoliteAgent:
    def __init__(self) -> None:
        self.seen = 0

    async def act(self, observation):
        self.seen += 1
        return AgentAction(action_type="speak", argument="After you.")


class SlowPolite(PoliteAgent):
    """A PoliteAgent that takes 0.15 s per action, like a model call: batches last long enough to break a store."""

    async def act(self, observation):
        await asyncio.sleep(0.15)
        return await super().act(observation)


class NoAct:
    pass


class Crashing:
    async def act(self, observation):
        raise ZeroDivisionError("oops")


class Quiet:
    async def act(self, observation):
        return AgentAction(action_type="non-verbal communication", argument="nods")


class TalkingAgent(LLMAgent):
    """An ``LLMAgent`` offered only "speak" on its turns, so an episode runs all its turns (a greedy small
    model otherwise leaves within a few): long, growing conversations for batching and caching measurements."""

    async def act(self, observation):
        obs = Observation.from_env(observation)
        if obs.my_turn:
            obs = obs.model_copy(update={"available_actions": ["speak"]})
        return await super().act(obs)
