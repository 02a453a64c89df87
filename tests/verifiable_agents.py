"""Scripted learners for verifiable-scenario tests, loaded by ``module:Class`` spec (this folder is on sys.path)."""

from sotopia_env.agents.scripted import ScriptedAgent


class Buyer(ScriptedAgent):
    """Offers 60% of its budget, then 95%; on the bike (budget $400, reservation drawn from 247..378) the second
    offer, $380, closes the deal whatever the draw."""

    def __init__(self) -> None:
        super().__init__(["Hi! Would you take $240 for it?", "Alright, $380."])


def _every_remedy() -> str:
    from sotopia_env.library import load_library

    library = load_library()
    scenarios = library.select("verifiable:persuasion")
    return ", ".join(sorted({k for s in scenarios for c in s.verifiable.concerns for k in c.remedy}))


class Stuffer(ScriptedAgent):
    """Issue #29's exploit, in issue #57's persuasion: one line that asks and names every remedy key phrase of the
    library's persuasion scenarios."""

    def __init__(self) -> None:
        super().__init__([f"Could you do it? I will take care of {_every_remedy()}"])
