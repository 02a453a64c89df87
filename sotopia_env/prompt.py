"""The prompts: the one function family that turns an observation into chat messages.

``LLMAgent`` prompts with ``render_prompt(observation, prompt)``, and the training data builder builds every
example with it, so a model is trained on exactly what it sees at inference. The Gymnasium env
(``sotopia_env.single_agent``) observes through it too, and ``prompt_text`` renders the messages as the one
string a model continues.

Three prompts (``PROMPTS``), chosen per model (``sotopia_env.backends.resolve.prompt_for_model``):

- ``sotopia`` (``sotopia_prompt``): SOTOPIA's shape. The whole background, the actions and the JSON to write in
  the system message; the conversation as a transcript in one user message. For API models, and for
  ``benchmark --protocol``.
- ``chat`` (``chat_prompt``): for small instruction-tuned models, run here (the embedded SmolLM2-135M). The
  seat's character, scenario and goal in a short system message that ends with one instruction, naming what the
  scenario is about (``Observation.topic``), and one in-character example line that opens on that topic (the
  embedded model's lines then talk about the scenario, not about answering: ``benchmarks/episode_quality.py``
  measures it); then the conversation so far as chat turns (the others' lines as ``user``, the seat's own
  actions as ``assistant``, in the JSON it wrote them in). The JSON itself is the grammar's job (the local
  backend constrains the reply to the action schema), so the prompt only shows its shape once. A game (a phase,
  a list of choices) is rendered as ``sotopia``: its rules need the long form.

- ``tools`` (``tools_prompt``, with ``sotopia_env.tool_calls``): for a policy trained through TRL's tool calls
  (``prompt: tools`` in its model directory). The conversation the TRL environment shows the seat: SOTOPIA's opening,
  then each move of its own as a tool call and what followed as the tool's answer; the agent sends the tools'
  schemas with it and reads the reply's tool call (``tool_calls.parse_tool_call``).

Which prompt a result was played under is recorded per episode (``episodes.protocol``), so results under
different prompts never share a protocol card.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sotopia_env.actions import ActionType
from sotopia_env.backends.base import prompt_text as prompt_text  # the messages as one string (a backend's)
from sotopia_env.observation import HistoryEntry, Observation
from sotopia_env.tool_calls import TOOL_OF, TOOLS, tool_call_message

SOTOPIA = "sotopia"
CHAT = "chat"

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


def render_prompt(observation: Observation | dict[str, Any], prompt: str = SOTOPIA) -> list[dict[str, Any]]:
    """The chat messages of ``observation`` under ``prompt`` (a name in ``PROMPTS``)."""
    return prompt_function(prompt)(Observation.from_env(observation))


def prompt_function(prompt: str) -> Callable[[Observation], list[dict[str, Any]]]:
    """The function of ``prompt``; a ``ValueError`` that names the known ones for any other name."""
    try:
        return PROMPTS[prompt]
    except KeyError:
        raise ValueError(f"unknown prompt {prompt!r} (known: {', '.join(sorted(PROMPTS))})") from None


def sotopia_prompt(observation: Observation) -> list[dict[str, str]]:
    """System: who you are, the scenario, what you know, your goal, and how to answer. User: the conversation
    and whose move it is (in a game, the phase and the choices a move must take one of). With three or more
    present (and in every game), the system message says how to address some of them only (``ADDRESSING``).

    Everything that stays the same from turn to turn comes before the conversation, so that a turn's prompt
    starts with the previous turn's prompt up to its last short line: a prefix cache (the local backend's, or
    a server's) then recomputes only the new lines. The actions are listed speak first (``ACTION_HELP``'s
    order), whatever order the env gives them in.
    """
    obs = observation
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


CHAT_FORMAT = '{"action_type": "speak", "argument": "..."}'
CHAT_EXAMPLE = "I was hoping we could talk about the {topic}."  # an in-character opening, on the topic
_GOAL_TAGS = re.compile(r"</?[a-z_]+>")  # SOTOPIA's <extra_info>, <strategy_hint>
_ME = re.compile(r"You are (?P<name>.+?)\. (?:Name: .+?\. (?P<who>\d+-year-old [^,]+), pronouns)?")
_OTHER = re.compile(r"(?:The other|Another) participant \((?P<label>.+?)\), (?P<relation>.+?): ")


def seat_brief(background: str) -> dict[str, Any]:
    """What the chat prompt takes from a seat's background (``observation.background_for`` writes it): the
    scenario, the seat's own name and description, the others as ``(label, relation)`` and the seat's goal."""
    brief: dict[str, Any] = {"scenario": "", "me": "", "others": [], "goal": ""}
    for line in background.splitlines():
        if line.startswith("Scenario: "):
            brief["scenario"] = line.removeprefix("Scenario: ")
        elif line.startswith("Your goal: "):
            brief["goal"] = _GOAL_TAGS.sub("", line.removeprefix("Your goal: "))
        elif (me := _ME.match(line)) is not None:
            brief["me"] = me["name"] + (f", a {me['who']}" if me["who"] else "")
        elif (other := _OTHER.match(line)) is not None:
            brief["others"].append((other["label"], other["relation"]))
    return brief


def chat_prompt(observation: Observation) -> list[dict[str, str]]:
    """System: the seat's character, the others present, the scenario, its goal, and one instruction: what to
    talk about (the scenario's topic, where known), with an example line in the reply's shape. Then the
    conversation as chat turns: the others' lines as ``user`` messages (their words, a gesture between
    asterisks), the seat's own as ``assistant`` messages in the JSON it wrote. The seat's own
    goal only: the others' goals and secrets are never in its background.

    A turn's prompt is the previous turn's plus the new lines, so a prefix cache recomputes only those."""
    obs = observation
    if obs.phase or obs.choices:
        return sotopia_prompt(obs)
    brief = seat_brief(obs.background)
    first = obs.agent.split()[0]
    others = brief["others"]
    partner = others[0][0] if len(others) == 1 else "the others"
    company = "; ".join(f"{label}, {relation}" for label, relation in others)
    about = f" about the {obs.topic}" if obs.topic else ""
    example = (
        f"For example: {CHAT_FORMAT.replace('...', CHAT_EXAMPLE.format(topic=obs.topic))}" if obs.topic else CHAT_FORMAT
    )
    system = (
        f"You are {brief['me'] or obs.agent}. You are with {company or 'someone'}.\n\n"
        f"Scenario: {brief['scenario']}\n\n"
        f"Your goal: {brief['goal']}\n\n"
        f"Say what {first} says next to {partner}{about}: one or two short sentences that move toward your goal. "
        f"{example}"
    )
    messages = [{"role": "system", "content": system}]
    named = len(others) > 1
    if not obs.history or obs.history[0].agent == obs.agent:
        _append(messages, "user", "(You start.)")
    for entry in obs.history:
        if entry.agent == obs.agent:
            if entry.action_type != ActionType.none.value:
                _append(messages, "assistant", entry.as_action().to_json())
        elif (line := _their_line(entry, named)) is not None:
            _append(messages, "user", line)
    if messages[-1]["role"] != "user":
        _append(messages, "user", "(Go on.)")
    return messages


def _their_line(entry: HistoryEntry, named: bool) -> str | None:
    """Another seat's move as the chat prompt shows it; None for doing nothing."""
    kind = ActionType(entry.action_type)
    if kind is ActionType.none:
        return None
    if kind is ActionType.leave:
        text = f"({entry.agent} leaves.)"
    elif kind is ActionType.speak:
        text = entry.argument
    else:
        text = f"*{entry.argument}*"
    return f"{entry.agent}: {text}" if named and kind is not ActionType.leave else text


def _append(messages: list[dict[str, str]], role: str, text: str) -> None:
    """A chat turn; a second line in a row from the same side joins the last message."""
    if messages[-1]["role"] == role:
        messages[-1]["content"] += "\n" + text
    else:
        messages.append({"role": role, "content": text})


def user_tail(messages: list[dict[str, Any]]) -> str:
    """The last paragraph of a SOTOPIA prompt's user message: whose move it is (and a game's choices)."""
    return str(messages[-1]["content"]).rpartition("\n\n")[2]


def tools_prompt(observation: Observation) -> list[dict[str, Any]]:
    """The conversation ``SocialToolEnv`` shows the seat at ``observation`` (the module docstring): the opening as
    SOTOPIA's prompt at the seat's first move, then a tool call and the tool's answer per move of its own."""
    obs = observation
    history = obs.history
    own = [i for i, h in enumerate(history) if h.agent == obs.agent and ActionType(h.action_type) in TOOL_OF]

    def at(cut: int) -> Observation:  # the seat's view when it made its move history[cut] (or now)
        if cut >= len(history):
            return obs
        return obs.model_copy(update={"history": history[:cut], "turn": history[cut].turn})

    messages: list[dict[str, Any]] = list(sotopia_prompt(at(own[0] if own else len(history))))
    for k, i in enumerate(own):
        nxt = own[k + 1] if k + 1 < len(own) else len(history)
        call = tool_call_message(history[i].as_action())
        assert call is not None
        news = [h.render() for h in history[i:nxt]]
        tail = user_tail(sotopia_prompt(at(nxt)))
        name = call["tool_calls"][0]["function"]["name"]
        messages += [call, {"role": "tool", "name": name, "content": "\n".join([*news, "", tail])}]
    return messages


PROMPTS: dict[str, Callable[[Observation], list[dict[str, Any]]]] = {
    SOTOPIA: sotopia_prompt,
    CHAT: chat_prompt,
    TOOLS: tools_prompt,  # the seat's moves as tool calls (a TRL-trained policy's format): sotopia_env.tool_calls
}
