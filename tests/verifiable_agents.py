"""Scripted learners for verifiable-scenario tests, loaded by ``module:Class`` spec (this folder is on sys.path)."""

from sotopia_env.agents.scripted import ScriptedAgent


class Buyer(ScriptedAgent):
    """Climbs from a low offer; on the bike (reservation $320) the third offer, $330, closes the deal."""

    def __init__(self) -> None:
        super().__init__(["Hi! Would you take $250 for it?", "I could go to 300.", "Alright, $330."])


def _every_concern_word() -> str:
    from sotopia_env.kinds.persuasion import library_concerns

    return ", ".join(sorted({w for concern in library_concerns() for w in concern}))


class Stuffer(ScriptedAgent):
    """Issue #29's exploit: one line that asks and names every concern word of the library's persuasion scenarios."""

    def __init__(self) -> None:
        super().__init__([f"Could you do it? I will take care of {_every_concern_word()}"])
