"""SOTOPIA's public, self-contained episode layout, in and out.

This is the layout of SOTOPIA's ``episodes_to_jsonl`` (``TwoAgentEpisodeWithScenarioBackgroundGoals`` in
``sotopia/database/serialization.py``) and of the released SOTOPIA and SOTOPIA-pi data
(``sotopia_episodes_v1_hf.jsonl``, ``experiment_episodes.json``). One flat object per episode:

- ``episode_id``, ``environment_id``, ``agent_ids``, ``experiment_tag``,
  ``experiment_model_name_pairs`` ([evaluator, agent 1, agent 2]);
- ``raw_messages`` / ``raw_rewards`` / ``raw_rewards_prompt``: the EpisodeLog's own ``messages``,
  ``rewards`` and ``rewards_prompt`` (see ``episodes.sotopia_format``);
- ``scenario``, ``codename``, ``agents_background`` ({name: text}), ``social_goals`` ({name: goal});
- ``social_interactions``: the transcript as ``render_for_humans`` writes it, one paragraph per turn
  (``Name said: "..."``, ``Name: [action] ...``; a turn whose agent did nothing is an empty paragraph);
- ``reasoning`` and ``rewards`` ([[overall, {dimension: score}], ...]).

SOTOPIA-pi's file keeps only ``episode_id, scenario, codename, agents_background, social_goals,
social_interactions``: such a row takes its turns from ``social_interactions`` and, with no rewards, is
imported unrated.

Reading: the seats are the names of ``agents_background`` (or ``social_goals``), in order. Each background
in SOTOPIA's wording (``"Ana Ruiz is a 35-year-old female nurse. she/her pronouns. <public info>
Personality and values description: <...> Ana's secrets: <secret>"``) gives age, gender, occupation,
pronouns, public info and secret; other text becomes the public info, with age 0. The personality text is
read back only in the form ``export_public`` writes; SOTOPIA's free text has no field here and is dropped,
as in ``episodes.sotopia_format``. The layout has no relationship: imported setups are strangers. Ids
come from ``environment_id``/``agent_ids``, else from the codename (with a digest of the scenario text,
since codenames repeat) and the names. Ratings
follow ``sotopia_format``'s rules (a reward without its dimensions, e.g. SOTOPIA's placeholder 0, is
unrated).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from sotopia_env.actions import ActionType
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.sotopia_format import (
    ENV,
    FILES,
    SotopiaFormatError,
    action_to_message,
    episode_from_sotopia,
    episode_to_sotopia,
    import_sotopia,
    local_id,
    message_to_action,
    numbered_rows,
    write_jsonl,
)
from sotopia_env.transcript import Turn
from sotopia_env.validation import field_problem

PUBLIC_FIELDS: tuple[str, ...] = (
    "episode_id",
    "environment_id",
    "agent_ids",
    "experiment_tag",
    "experiment_model_name_pairs",
    "raw_messages",
    "raw_rewards",
    "raw_rewards_prompt",
    "scenario",
    "codename",
    "agents_background",
    "social_goals",
    "social_interactions",
    "reasoning",
    "rewards",
)
_MARKERS = ("social_interactions", "agents_background", "social_goals", "raw_messages")


class PublicRow(BaseModel):
    """One row of the public layout, as read: every field but ``scenario`` and ``social_goals`` optional."""

    model_config = ConfigDict(extra="ignore")

    episode_id: str | None = Field(None, validation_alias=AliasChoices("episode_id", "epsiode_id"))
    environment_id: str | None = None
    agent_ids: list[str] | None = None
    experiment_tag: str | None = None
    experiment_model_name_pairs: list[str] | None = None
    raw_messages: list[list[tuple[str, str, str]]] | None = None
    raw_rewards: list[Any] | None = None
    scenario: str
    codename: str | None = None
    agents_background: dict[str, str] | None = None
    social_goals: dict[str, str]
    social_interactions: str | None = None
    reasoning: str | None = None
    rewards: list[Any] | None = None

    @field_validator(
        "agent_ids", "experiment_model_name_pairs", "raw_messages", "raw_rewards", "rewards", mode="before"
    )
    @classmethod
    def _decoded(cls, value: Any) -> Any:
        """Arrow cannot hold ``[score, {dimension: score}]``, so a ``datasets`` table may keep such columns as
        JSON text: decode it."""
        if isinstance(value, str) and value.lstrip().startswith("["):
            try:
                return json.loads(value)
            except json.JSONDecodeError:
                return value
        return value

    @field_validator("agents_background", "social_goals", mode="before")
    @classmethod
    def _present(cls, value: Any) -> Any:
        """A saved ``datasets`` table stores these as one struct with every name of every row: drop the nulls.
        Given as JSON text, they are decoded."""
        if isinstance(value, str) and value.lstrip().startswith("{"):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return value
        return {k: v for k, v in value.items() if v is not None} if isinstance(value, Mapping) else value

    def seats(self, ordered: bool) -> list[str]:
        """The names in seat order: ``raw_messages``' first turn if it names them all, else the key order, or
        (when the keys lost their order, as in a saved ``datasets`` table) the order of first action."""
        names = list(self.agents_background or self.social_goals)
        if self.raw_messages:
            first = [m[1] for m in self.raw_messages[0] if m[0] == ENV and m[1] in names]
            if sorted(first) == sorted(names):
                return first
        if not ordered and self.social_interactions:
            starts = (_action_start(line, names) for line in self.social_interactions.split("\n"))
            seen = dict.fromkeys(s[0] for s in starts if s is not None)
            return [*seen, *(n for n in names if n not in seen)]
        return names


def is_public_row(row: Mapping[str, Any]) -> bool:
    """Whether a JSON object is in the public layout (rather than SOTOPIA's EpisodeLog layout)."""
    return any(key in row for key in _MARKERS)


# -- characters ---------------------------------------------------------------------------------------

_GENDER_ADJ = {"man": "male", "woman": "female", "nonbinary": "nonbinary"}
_GENDER_NOUN = {"male": "Man", "female": "Woman", "nonbinary": "Nonbinary"}
_PERSONALITY = re.compile(
    r"Big Five: (?P<big_five>.*?)\. Moral values: (?P<moral>.*?)\. Schwartz values: (?P<schwartz>.*?)\. "
    r"Decision-making style: (?P<style>.*?)\.",
    re.DOTALL,
)


def _personality(profile: Mapping[str, Any]) -> str:
    if profile.get("personality_and_values"):
        return str(profile["personality_and_values"])
    return (
        f"Big Five: {profile['big_five']}. Moral values: {', '.join(profile['moral_values'])}. "
        f"Schwartz values: {', '.join(profile['schwartz_personal_values'])}. "
        f"Decision-making style: {profile['decision_making_style']}."
    )


def background_text(profile: Mapping[str, Any]) -> str:
    """An AgentProfile dict (``sotopia_format``'s layout) in the wording of SOTOPIA's ``agents_background``."""
    first, last = profile["first_name"], profile["last_name"]
    gender = str(profile["gender"])
    adj = _GENDER_ADJ.get(gender.lower(), gender.lower())
    who = " ".join(w for w in (adj, str(profile["occupation"]).lower()) if w)
    return (
        f"{first} {last} is a {profile['age']}-year-old {who}. {profile['gender_pronoun']} pronouns. "
        f"{profile['public_info']} Personality and values description: {_personality(profile)} "
        f"{first}'s secrets: {profile['secret']}"
    )


def profile_from_background(name: str, text: str, pk: str) -> dict[str, Any]:
    """An AgentProfile dict from a name (``First Last...``) and its background text, as far as the text says."""
    first, _, last = name.strip().partition(" ")
    profile: dict[str, Any] = {"pk": pk, "first_name": first, "last_name": last.strip(), "public_info": text}
    match = re.fullmatch(
        rf"{re.escape(name.strip())} is an? (?P<age>\d+)-year-old (?P<who>.*?)\. (?P<pronouns>[^.]*?) pronouns\."
        rf"(?P<public>.*?)(?: ?Personality and values description: (?P<personality>.*?))?"
        rf"(?: ?{re.escape(first)}'s secrets: (?P<secret>.*))?",
        text.strip(),
        re.DOTALL,
    )
    if match is None:
        return profile
    adj, _, job = match["who"].partition(" ")
    if adj not in _GENDER_NOUN:
        adj, job = "", match["who"]
    profile |= {
        "age": int(match["age"]),
        "gender": _GENDER_NOUN.get(adj, ""),
        "gender_pronoun": match["pronouns"].strip(),
        "occupation": job.strip(),
        "public_info": match["public"].strip(),
        "secret": (match["secret"] or "").strip(),
    }
    ours = _PERSONALITY.fullmatch((match["personality"] or "").strip())
    if ours is not None:
        profile |= {
            "big_five": ours["big_five"],
            "moral_values": [v for v in ours["moral"].split(", ") if v],
            "schwartz_personal_values": [v for v in ours["schwartz"].split(", ") if v],
            "decision_making_style": ours["style"],
        }
    return profile


# -- social_interactions ------------------------------------------------------------------------------


def render_interactions(turns: list[Turn]) -> str:
    """The transcript as SOTOPIA's ``render_for_humans`` writes it: a paragraph per turn, nothing for none."""
    by_turn: dict[int, list[str]] = {}
    for t in turns:
        lines = by_turn.setdefault(t.turn, [])
        if t.action.action_type is not ActionType.none:
            text = action_to_message(t.action)
            lines.append(f"{t.agent} {text}" if text.startswith("said:") else f"{t.agent}: {text}")
    return "\n\n".join("\n".join(by_turn.get(n, [])) for n in range(max(by_turn) + 1 if by_turn else 0))


def _action_start(line: str, names: list[str]) -> tuple[str, str] | None:
    """``(name, SOTOPIA action text)`` if ``line`` starts an action of one of ``names``, else None."""
    for name in sorted(names, key=len, reverse=True):
        if not line.startswith(name):
            continue
        rest = line[len(name) :]
        rest = rest[1:] if rest.startswith(":") else rest
        if rest.startswith(" ") and rest[1:].startswith(("said:", "[", "left the conversation", "did nothing")):
            return name, rest[1:]
    return None


def messages_from_interactions(text: str, names: list[str]) -> list[list[list[str]]]:
    """``social_interactions`` as SOTOPIA ``messages`` (one ``[agent, "Environment", action]`` per turn).

    Paragraphs are turns; an empty paragraph is a turn whose agent did nothing. Turns follow the seats
    round-robin, as SOTOPIA plays them: an action by someone other than the turn's agent means the turn's
    agent did nothing (``render_for_humans`` leaves such turns out). A line that starts no action
    continues the one before; text up to a ``Conversation Starts:`` is the agents' perspectives and is
    skipped. SotopiaFormatError names the offending paragraph.
    """
    actions: list[tuple[str, str] | None] = []  # None: an empty paragraph
    text = text.rpartition("Conversation Starts:")[2]  # the perspectives before it, if any, are no turns
    for number, paragraph in enumerate(text.strip().split("\n\n")):
        if not paragraph.strip():
            actions.append(None)
            continue
        for k, line in enumerate(paragraph.split("\n")):
            start = _action_start(line, names)
            if start is not None:
                actions.append(start)
            elif actions and actions[-1] is not None:
                actions[-1] = (actions[-1][0], actions[-1][1] + ("\n" if k else "\n\n") + line)
            elif line.strip():
                preview = line if len(line) <= 60 else line[:60] + "…"
                raise SotopiaFormatError(f"paragraph {number}: {preview!r} is no action of {' or '.join(names)}")
    messages: list[list[list[str]]] = []
    for action in actions:
        if action is not None:
            try:
                message_to_action(action[1])
            except SotopiaFormatError as exc:
                raise SotopiaFormatError(f"{action[0]}: {exc}") from None
            while names[len(messages) % len(names)] != action[0]:
                messages.append([[names[len(messages) % len(names)], ENV, "did nothing"]])
        who, said = action or (names[len(messages) % len(names)], "did nothing")
        messages.append([[who, ENV, said]])
    return messages


# -- rows <-> EpisodeLogs -----------------------------------------------------------------------------


def episode_from_public(row: Mapping[str, Any], agent_class: str = "LLMAgent", ordered: bool = True) -> EpisodeLog:
    """One public-layout row as an EpisodeLog; SotopiaFormatError names the field. ``ordered``: whether the
    row's name keys are in seat order (not so in a saved ``datasets`` table)."""
    try:
        r = PublicRow.model_validate(row)
    except ValidationError as exc:
        raise SotopiaFormatError(field_problem(exc, "(row)")) from None
    backgrounds = r.agents_background or {}
    names = r.seats(ordered)
    if len(names) < 2 or set(names) != set(r.social_goals):
        raise SotopiaFormatError(
            f"field 'social_goals': names {sorted(r.social_goals)} do not match agents_background {sorted(names)}"
        )
    in_order = ordered or r.raw_messages is not None  # agent_ids are in seat order; names may have been sorted
    ids = r.agent_ids if in_order and r.agent_ids and len(r.agent_ids) == len(names) else names
    agents = {pk: profile_from_background(n, backgrounds.get(n, ""), pk) for pk, n in zip(ids, names, strict=True)}
    for profile in agents.values():
        if not profile["last_name"]:
            raise SotopiaFormatError(f"field 'agents_background': {profile['first_name']!r} has no last name")
    # without an environment_id: the codename (not unique in SOTOPIA's data) and a digest of the scenario text
    digest = hashlib.sha1(r.scenario.encode("utf-8")).hexdigest()[:8]
    env_pk = r.environment_id or f"{local_id(None, r.codename or 'scenario')}-{digest}"
    env = {
        "pk": env_pk,
        "codename": r.codename or "",
        "scenario": r.scenario,
        "agent_goals": [r.social_goals[n] for n in names],
        "source": "sotopia",
    }
    if r.raw_messages is not None:
        messages: Any = [[list(m) for m in turn] for turn in r.raw_messages]
        field = "raw_messages"
    else:
        try:
            messages = messages_from_interactions(r.social_interactions or "", names)
        except SotopiaFormatError as exc:
            raise SotopiaFormatError(f"field 'social_interactions': {exc}") from None
        field = "social_interactions"
    rewards = r.rewards if r.rewards is not None else r.raw_rewards
    episode = {
        "pk": r.episode_id,
        "environment": env_pk,
        "agents": ids,
        "tag": r.experiment_tag or "",
        "models": r.experiment_model_name_pairs or [],
        "messages": messages,
        "reasoning": r.reasoning or "",
        "rewards": rewards if rewards is not None else [0.0] * len(names),
    }
    return episode_from_sotopia(episode, {env_pk: env}, agents, agent_class=agent_class, messages_field=field)


def episode_to_public(log: EpisodeLog) -> dict[str, Any]:
    """An EpisodeLog as one row of the public layout (all fifteen fields, in SOTOPIA's order)."""
    episode, env, agents = episode_to_sotopia(log)
    names = log.setup.agent_names
    return {
        "episode_id": episode["pk"],
        "environment_id": episode["environment"],
        "agent_ids": episode["agents"],
        "experiment_tag": episode["tag"],
        "experiment_model_name_pairs": episode["models"],
        "raw_messages": episode["messages"],
        "raw_rewards": episode["rewards"],
        "raw_rewards_prompt": episode["rewards_prompt"],
        "scenario": env["scenario"],
        "codename": env["codename"],
        "agents_background": {n: background_text(a) for n, a in zip(names, agents, strict=True)},
        "social_goals": dict(zip(names, env["agent_goals"], strict=True)),
        "social_interactions": render_interactions(log.turns),
        "reasoning": episode["reasoning"],
        "rewards": episode["rewards"],
    }


def export_public(logs: Iterable[EpisodeLog], path: str | Path, include_unrated: bool = False) -> int:
    """Write the public layout as JSONL; unrated and failed episodes only with ``include_unrated``
    (SOTOPIA would read their placeholder reward 0.0 as a score). Returns how many were written."""
    return write_jsonl((episode_to_public(log) for log in logs if include_unrated or log.status == "rated"), path)


# -- reading files ------------------------------------------------------------------------------------


def _array_rows(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SotopiaFormatError(f"{path}: cannot read file: {getattr(exc, 'strerror', None) or exc}") from None
    except json.JSONDecodeError as exc:
        raise SotopiaFormatError(f"{path}: malformed JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, list):
        raise SotopiaFormatError(f"{path}: expected a JSON array of episodes")
    yield from ((f"{path}: row {i}", row) for i, row in enumerate(data))


def _dataset_rows(path: Path) -> Iterator[tuple[str, Any]]:
    from datasets import DatasetDict, load_from_disk

    try:
        data = load_from_disk(str(path))
    except (OSError, ValueError) as exc:
        raise SotopiaFormatError(f"{path}: cannot load the saved dataset: {exc}") from None
    parts = data.items() if isinstance(data, DatasetDict) else [("", data)]
    for split, part in parts:
        label = f"{path} [{split}]" if split else str(path)
        yield from ((f"{label}: row {i}", row) for i, row in enumerate(part))


def _file_rows(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        with path.open(encoding="utf-8") as f:
            head = f.read(4096).lstrip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SotopiaFormatError(f"{path}: cannot read file: {getattr(exc, 'strerror', None) or exc}") from None
    return _array_rows(path) if head.startswith("[") else iter(numbered_rows(path))


def read_public(path: str | Path, agent_class: str = "LLMAgent") -> list[EpisodeLog]:
    """Every episode of a public-layout JSONL file, JSON array file or saved ``datasets`` directory.

    Every row is converted before any is returned; the first bad one raises SotopiaFormatError naming
    ``file:line`` (or ``file: row N``) and the field.
    """
    path = Path(path)
    ordered = not path.is_dir()
    rows = _file_rows(path) if ordered else _dataset_rows(path)
    logs = []
    for where, row in rows:
        if not isinstance(row, Mapping):
            raise SotopiaFormatError(f"{where}: expected a JSON object")
        if not is_public_row(row):
            raise SotopiaFormatError(
                f"{where}: not SOTOPIA's public layout (no social_goals/agents_background); for EpisodeLog rows "
                f"give the directory that holds them with {FILES['environments']} and {FILES['agents']}"
            )
        try:
            logs.append(episode_from_public(row, agent_class, ordered))
        except SotopiaFormatError as exc:
            raise SotopiaFormatError(f"{where}: {exc}") from None
    return logs


def read_sotopia(path: str | Path, agent_class: str = "LLMAgent") -> list[EpisodeLog]:
    """SOTOPIA episodes in either layout, detected: a directory with SOTOPIA's profile files
    (``sotopia_format.import_sotopia``), or the public layout (``read_public``)."""
    path = Path(path)
    if not path.exists():
        raise SotopiaFormatError(f"{path}: no such file or directory")
    if path.is_dir() and (path / FILES["environments"]).exists():
        return import_sotopia(path, agent_class)
    if path.is_dir() and not (path / "dataset_info.json").exists() and not (path / "dataset_dict.json").exists():
        raise SotopiaFormatError(
            f"{path}: neither SOTOPIA's profile files ({FILES['environments']}, ...) nor a saved datasets directory"
        )
    return read_public(path, agent_class)
