"""The one function that turns an observation into chat messages.

``LLMAgent`` prompts with it, and the training data builder builds every
example with it, so a model is trained on exactly what it sees at inference.
The Gymnasium env (``sotopia_env.single_agent``) observes through it too, and
``prompt_text`` renders the messages as the one string a model continues.
"""

from __future__ import annotations

from sotopia_env.backends.base import prompt_text as prompt_text  # the messages as one string (a backend's)
from sotopia_env.observation import Observation

SYSTEM_TEMPLATE = """You are playing {name} in a social simulation. Stay in character and pursue your goal, \
as a real person would: naturally, briefly, and without revealing your goal or secrets unless it helps you.

{background}"""

ACTION_HELP = {
    "speak": "say something to the other person",
    "non-verbal communication": "make a gesture or facial expression",
    "action": "do something physical",
    "leave": "leave the conversation (only once your goal is reached or clearly hopeless)",
    "none": "do nothing",
}


MAX_LISTED_CHOICES = 12  # a negotiation's splits run to dozens: the prompt shows a few, the schema holds them all
ADDRESSING = (
    ' To be heard by some of the others only, add a third key, "to": a list of their names; '
    "without it, everyone present hears you."
)


def render_prompt(observation: Observation) -> list[dict[str, str]]:
    """System: who you are, the scenario, what you know, your goal, and how to answer. User: the conversation
    and whose move it is (in a game, the phase and the choices a move must take one of). With three or more
    present (and in every game), the system message says how to address some of them only (``ADDRESSING``).

    Everything that stays the same from turn to turn comes before the conversation, so that a turn's prompt
    starts with the previous turn's prompt up to its last short line: a prefix cache (the local backend's, or
    a server's) then recomputes only the new lines. The actions are listed speak first (``ACTION_HELP``'s
    order), whatever order the env gives them in.
    """
    obs = Observation.from_env(observation)
    history = "\n".join(h.render() for h in obs.history) or "(The conversation has not started yet.)"
    ranked = sorted(obs.available_actions, key=lambda a: list(ACTION_HELP).index(a) if a in ACTION_HELP else 99)
    options = "\n".join(f'- "{a}": {ACTION_HELP.get(a, a)}' for a in ranked)
    system = (
        SYSTEM_TEMPLATE.format(name=obs.agent, background=obs.background)
        + f"\n\nOn your move, choose one action:\n{options}\n\n"
        'Reply with one JSON object only, with two keys: "action_type", one of the actions above, '
        'and "argument", the words you say or a description of what you do.'
        + (ADDRESSING if obs.recipients or obs.phase else "")
    )
    phase = f" ({obs.phase} phase)" if obs.phase else ""
    user = (
        f"Conversation so far:\n{history}\n\n"
        f"It is turn #{obs.turn}{phase} and your move, {obs.agent}. Choose one action: {', '.join(ranked)}."
    )
    if obs.choices:
        shown = obs.choices if len(obs.choices) <= MAX_LISTED_CHOICES else obs.choices[:: len(obs.choices) // 4][:4]
        more = "" if len(shown) == len(obs.choices) else f" (one of {len(obs.choices)} like these)"
        user += f" The argument must be one of: {'; '.join(shown)}{more}."

    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
