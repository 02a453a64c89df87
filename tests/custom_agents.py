"""Custom agents loaded by ``module:Class`` spec in tests (this folder is on sys.path under pytest)."""

from sotopia_env.actions import AgentAction


class PoliteAgent:
    def __init__(self) -> None:
        self.seen = 0

    async def act(self, observation):
        self.seen += 1
        return AgentAction(action_type="speak", argument="After you.")


class NoAct:
    pass


class Crashing:
    async def act(self, observation):
        raise ZeroDivisionError("oops")


class Quiet:
    async def act(self, observation):
        return AgentAction(action_type="non-verbal communication", argument="nods")
