"""Scripted learners for verifiable-scenario tests, loaded by ``module:Class`` spec (this folder is on sys.path)."""

from sotopia_env.agents.scripted import ScriptedAgent


class Buyer(ScriptedAgent):
    """Climbs from a low offer; on the bike (reservation $320) the third offer, $330, closes the deal."""

    def __init__(self) -> None:
        super().__init__(["Hi! Would you take $250 for it?", "I could go to 300.", "Alright, $330."])
