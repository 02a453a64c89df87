"""SOTOPIA's own JSON layouts (github.com/sotopia-lab/sotopia, ``sotopia/database/``), in and out.

SOTOPIA keeps four record types, each a flat JSON object (one per line in JSONL):

- ``AgentProfile``: pk, first_name, last_name, age, occupation, gender, gender_pronoun,
  public_info, big_five (free text), moral_values, schwartz_personal_values,
  personality_and_values, decision_making_style, secret, model_id, mbti, tag.
- ``EnvironmentProfile``: pk, codename, source, scenario, agent_goals, relationship (0..5),
  age_constraint (``"[(18, 70), (18, 70)]"``), occupation_constraint
  (``"[['doctor'], ['nurse']]"`` or ``"nan"``), agent_constraint, tag.
- ``RelationshipProfile``: pk, agent_1_id, agent_2_id, relationship, background_story.
- ``EpisodeLog``: pk, environment, agents, tag, models ([evaluator, agent 1, agent 2]),
  messages, reasoning, rewards, rewards_prompt.

``messages`` is a list of turns. Turn *t* holds the Environment's observation for
each agent (the backgrounds at t=0, then ``"Turn #t-1: ..."``) followed by one
``[agent, "Environment", text]`` entry per agent; an agent that did not act
"did nothing". A final turn holds only the last observations. Action texts:
``said: "..."``, ``[non-verbal communication] ...``, ``[action] ...``,
``left the conversation``, ``did nothing``.

What does not survive the trip: SOTOPIA has no agent class, split, timings or
usage, and no place for a ``none`` turn of one agent when another acted on the
same turn; an all-"did nothing" turn is read as a ``none`` by the round-robin
agent of that turn (``agents[t % n]``). Reasoning survives per dimension (one
line each). Unrated episodes are written with reward ``0.0`` and
``unrated: <error>`` in the reasoning, and read back as unrated; so is SOTOPIA's
own placeholder, rewards of exactly 0 with no reasoning.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.log import AgentSpec, EpisodeLog, combo_key
from sotopia_env.errors import UserError
from sotopia_env.evaluators import SOTOPIA_DIMENSIONS, AgentRating, DimensionScore, EpisodeRating
from sotopia_env.jsonl import json_lines
from sotopia_env.observation import background_for
from sotopia_env.profiles import AgentConstraint, BigFive, Character, RelationshipProfile, Scenario
from sotopia_env.transcript import Turn, render_action
from sotopia_env.validation import field_problem

ENV = "Environment"
NO_RATINGS = "imported SOTOPIA episode has no ratings"
DIMENSIONS: tuple[str, ...] = tuple(d.name for d in SOTOPIA_DIMENSIONS)
T = TypeVar("T")
FILES = {
    "agents": "agent_profiles.jsonl",
    "environments": "environment_profiles.jsonl",
    "relationships": "relationship_profiles.jsonl",
    "episodes": "episodes.jsonl",
}


class SotopiaFormatError(UserError, ValueError):
    """SOTOPIA data that cannot be converted; the message names the record (and file:line) and field."""


def _validation_error(what: str, exc: ValidationError) -> SotopiaFormatError:
    return SotopiaFormatError(f"{what}: {field_problem(exc, '(record)')}")


def local_id(pk: object, fallback: str) -> str:
    """A SOTOPIA pk (e.g. a ULID) as one of our ids: lower case, ``[a-z0-9_-]``."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", str(pk or "").lower()).strip("-_")
    return slug or re.sub(r"[^a-z0-9_-]+", "-", fallback.lower()).strip("-_") or "unnamed"


# -- characters ---------------------------------------------------------------------------------------

_TRAITS = {
    "openness": ("openness",),
    "conscientiousness": ("conscientious",),
    "extraversion": ("extraver", "extrover"),
    "agreeableness": ("agreeabl",),
    "neuroticism": ("neurotic",),
}
_TRAIT_LABELS = {
    "openness": "Openness to Experience",
    "conscientiousness": "Conscientiousness",
    "extraversion": "Extraversion",
    "agreeableness": "Agreeableness",
    "neuroticism": "Neuroticism",
}


def parse_big_five(text: str) -> BigFive:
    """SOTOPIA's free text (``"Openness to Experience - High; Conscientiousness - Low; ..."``) as a BigFive.

    Each ``;``/``,``/newline-separated part that names a trait gives that trait's
    level (the part without the trait's name); a trait not mentioned is ``unknown``.
    """
    levels: dict[str, str] = {}
    for part in re.split(r"[;,\n]", text or ""):
        lowered = part.lower()
        for trait, stems in _TRAITS.items():
            if trait in levels or not any(stem in lowered for stem in stems):
                continue
            level = re.sub(
                r"(?i)\b(openness( to experience)?|conscientiousness|extraversion|extroversion|"
                r"agreeableness|neuroticism)\b",
                "",
                part,
            )
            levels[trait] = level.strip(" -:=\t").strip() or "unknown"
    return BigFive(**{trait: levels.get(trait, "unknown") for trait in _TRAITS})


def format_big_five(big_five: BigFive) -> str:
    return "; ".join(f"{_TRAIT_LABELS[t]} - {getattr(big_five, t)}" for t in _TRAITS)


def character_from_sotopia(d: Mapping[str, Any]) -> Character:
    """An AgentProfile dict as a Character; ``id`` comes from ``pk``. Drops personality_and_values,
    mbti, model_id and tag, which Character has no field for."""
    name = f"{d.get('first_name', '')} {d.get('last_name', '')}"
    try:
        return Character(
            id=local_id(d.get("pk"), name),
            first_name=d.get("first_name", ""),
            last_name=d.get("last_name", ""),
            age=d.get("age", 0),
            gender=d.get("gender", ""),
            pronouns=d.get("gender_pronoun", ""),
            occupation=d.get("occupation", ""),
            public_info=d.get("public_info", ""),
            big_five=parse_big_five(str(d.get("big_five", ""))),
            moral_values=list(d.get("moral_values") or []),
            schwartz_values=list(d.get("schwartz_personal_values") or []),
            decision_making_style=d.get("decision_making_style", ""),
            secret=d.get("secret", ""),
        )
    except ValidationError as exc:
        raise _validation_error(f"agent profile {d.get('pk') or name!r}", exc) from None


def character_to_sotopia(c: Character) -> dict[str, Any]:
    return {
        "pk": c.id,
        "first_name": c.first_name,
        "last_name": c.last_name,
        "age": c.age,
        "occupation": c.occupation,
        "gender": c.gender,
        "gender_pronoun": c.pronouns,
        "public_info": c.public_info,
        "big_five": format_big_five(c.big_five),
        "moral_values": list(c.moral_values),
        "schwartz_personal_values": list(c.schwartz_values),
        "personality_and_values": "",
        "decision_making_style": c.decision_making_style,
        "secret": c.secret,
        "model_id": "",
        "mbti": "",
        "tag": "",
    }


# -- scenarios ----------------------------------------------------------------------------------------


def _literal(value: Any, field: str, what: str) -> Any:
    """A constraint string parsed with ``ast.literal_eval``; None for null, empty or ``"nan"``."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "nan", "none")):
        return None
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise SotopiaFormatError(f"{what}: field '{field}': cannot parse {value!r}") from None


def _constraints(d: Mapping[str, Any], seats: int, what: str) -> list[AgentConstraint] | None:
    ages = _literal(d.get("age_constraint"), "age_constraint", what)
    jobs = _literal(d.get("occupation_constraint"), "occupation_constraint", what)
    if ages is None and jobs is None:
        return None
    for field, value in (("age_constraint", ages), ("occupation_constraint", jobs)):
        if value is not None and (not isinstance(value, list | tuple) or len(value) != seats):
            raise SotopiaFormatError(f"{what}: field '{field}': expected one entry per agent ({seats})")
    out = []
    for seat in range(seats):
        low, high = (0, 120)
        if ages is not None:
            try:
                low, high = (int(x) for x in ages[seat])
            except (TypeError, ValueError):
                raise SotopiaFormatError(f"{what}: field 'age_constraint': seat {seat} is not (min, max)") from None
        occupations = jobs[seat] if jobs is not None else None
        if isinstance(occupations, str):
            occupations = [occupations]
        out.append(
            AgentConstraint(
                min_age=max(0, low),
                max_age=min(120, high),
                occupations=[str(o) for o in occupations] if occupations else None,
            )
        )
    return out


def scenario_from_sotopia(d: Mapping[str, Any], split: str = "train") -> Scenario:
    """An EnvironmentProfile dict as a Scenario; ``id`` comes from ``pk``, ``tags`` from ``tag`` (comma-separated).
    ``agent_constraint`` (specific agent pks per seat) has no counterpart and is dropped. ``verifiable``,
    ``relationships`` and ``game`` (ours, not SOTOPIA's) carry a verifiable scenario's hidden facts, a per-pair
    relationship matrix and a game's roles and phases."""
    what = f"environment profile {d.get('pk') or d.get('codename')!r}"
    goals = list(d.get("agent_goals") or [])
    tag = str(d.get("tag") or "")
    try:
        return Scenario(
            id=local_id(d.get("pk"), str(d.get("codename", ""))),
            codename=str(d.get("codename", "")),
            scenario=str(d.get("scenario", "")),
            goals=goals,
            relationship=d.get("relationship", 0),
            constraints=_constraints(d, len(goals), what),
            source=str(d.get("source") or "sotopia"),
            tags=[t.strip() for t in tag.split(",") if t.strip()],
            split=split,  # type: ignore[arg-type]
            verifiable=d.get("verifiable"),
            relationships=d.get("relationships"),
            game=d.get("game"),
        )
    except ValidationError as exc:
        raise _validation_error(what, exc) from None


def scenario_to_sotopia(s: Scenario) -> dict[str, Any]:
    cons = s.constraints
    ages = str([(c.min_age, c.max_age) for c in cons]) if cons else None
    has_jobs = bool(cons) and any(c.occupations for c in cons or [])
    jobs = str([c.occupations for c in cons or []]) if has_jobs else None
    return {
        "pk": s.id,
        "codename": s.codename,
        "source": s.source,
        "scenario": s.scenario,
        "agent_goals": list(s.goals),
        "relationship": int(s.relationship),
        "age_constraint": ages,
        "occupation_constraint": jobs,
        "agent_constraint": None,
        "tag": ",".join(s.tags),
    } | {
        key: value
        for key, value in (
            ("verifiable", s.verifiable and s.verifiable.model_dump()),
            ("relationships", s.relationships and [[int(r) for r in row] for row in s.relationships]),
            ("game", s.game and s.game.model_dump(mode="json")),
        )
        if value is not None
    }


# -- relationships ------------------------------------------------------------------------------------


def relationship_from_sotopia(d: Mapping[str, Any]) -> RelationshipProfile:
    a, b = str(d.get("agent_1_id", "")), str(d.get("agent_2_id", ""))
    try:
        return RelationshipProfile(
            characters=(local_id(a, "agent-1"), local_id(b, "agent-2")),
            relationship=d.get("relationship", 0),
            background_story=str(d.get("background_story") or ""),
        )
    except ValidationError as exc:
        raise _validation_error(f"relationship profile {d.get('pk') or (a, b)!r}", exc) from None


def relationship_to_sotopia(r: RelationshipProfile) -> dict[str, Any]:
    return {
        "pk": f"{r.characters[0]}--{r.characters[1]}",
        "agent_1_id": r.characters[0],
        "agent_2_id": r.characters[1],
        "relationship": int(r.relationship),
        "background_story": r.background_story,
    }


# -- actions ------------------------------------------------------------------------------------------


def action_to_message(action: AgentAction) -> str:
    """An action as SOTOPIA writes it (``said: "..."``, ``[action] ...``, ...)."""
    return render_action("", action).lstrip()


def message_to_action(text: str) -> AgentAction:
    """Parse SOTOPIA's action text back; SotopiaFormatError if it is none of the five forms."""
    if text == "did nothing":
        return AgentAction(action_type=ActionType.none)
    if text.startswith("said:"):
        body = text[len("said:") :].lstrip(" ")
        if len(body) >= 2 and body.startswith('"') and body.endswith('"'):
            body = body[1:-1]
        return AgentAction(action_type=ActionType.speak, argument=body)
    for kind in (ActionType.non_verbal, ActionType.action):
        prefix = f"[{kind.value}]"
        if text.startswith(prefix):
            return AgentAction(action_type=kind, argument=text[len(prefix) :].removeprefix(" "))
    if text.startswith("left the conversation"):
        rest = text[len("left the conversation") :]
        return AgentAction(action_type=ActionType.leave, argument=rest[2:] if rest.startswith(": ") else "")
    preview = text if len(text) <= 60 else text[:60] + "…"
    raise SotopiaFormatError(f"unrecognised action message {preview!r}")


# -- episodes: ours -> SOTOPIA ------------------------------------------------------------------------


def _messages(log: EpisodeLog) -> list[list[list[str]]]:
    names = log.setup.agent_names
    names += sorted({t.agent for t in log.turns} - set(names))
    by_turn: dict[int, dict[str, AgentAction]] = {}
    for t in log.turns:
        by_turn.setdefault(t.turn, {})[t.agent] = t.action
    seats = range(len(log.setup.characters))
    observations = {n: background_for(log.setup, i) for i, n in zip(seats, names, strict=False)}
    messages: list[list[list[str]]] = []
    for number in range(max(by_turn) + 1 if by_turn else 0):
        acted = by_turn.get(number, {})
        row = [[ENV, n, observations.get(n, "")] for n in names]
        row += [[n, ENV, action_to_message(acted[n]) if n in acted else "did nothing"] for n in names]
        messages.append(row)
        shown = "\n".join(render_action(n, a) for n, a in acted.items() if a.action_type is not ActionType.none)
        observations = dict.fromkeys(names, f"Turn #{number}: {shown}\n")
    messages.append([[ENV, n, observations.get(n, "")] for n in names])
    return messages


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _reasoning(log: EpisodeLog) -> str:
    rating = log.rating
    if rating is None or rating.ratings is None:
        why = _one_line((rating.error if rating is not None else log.error) or "the episode failed")
        ended = f"terminated: {log.termination_reason}; " if log.termination_reason else ""
        return f"Environment comments: {ended}unrated: {why}\n"
    parts = [f"Environment comments: terminated: {log.termination_reason}; \n"] if log.termination_reason else []
    for seat, name in enumerate(log.setup.agent_names, 1):
        agent = rating.ratings.get(name)
        if agent is None:
            continue
        lines = [f"{dim}: {_one_line(score.reasoning)}" for dim, score in agent.scores.items()]
        parts.append(f"Agent {seat} comments:\n" + "\n".join(lines) + "\n")
    return "".join(parts)


def _rewards(log: EpisodeLog) -> list[Any]:
    ratings = log.rating.ratings if log.rating is not None else None
    out: list[Any] = []
    for name in log.setup.agent_names:
        if ratings is None or name not in ratings:
            out.append(0.0)
            continue
        agent = ratings[name]
        scores: dict[str, float] = {dim: float(s.score) for dim, s in agent.scores.items()}
        scores["overall_score"] = agent.overall
        out.append([agent.overall, scores])
    return out


def episode_to_sotopia(log: EpisodeLog) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """(EpisodeLog dict, EnvironmentProfile dict, AgentProfile dicts) in SOTOPIA's layout."""
    evaluator = log.rating.evaluator if log.rating is not None else ""
    episode = {
        "pk": log.id,
        "environment": log.setup.scenario.id,
        "agents": [c.id for c in log.setup.characters],
        "tag": log.tag,
        "models": [evaluator, *log.models],
        "messages": _messages(log),
        "reasoning": _reasoning(log),
        "rewards": _rewards(log),
        "rewards_prompt": "",
    }
    return episode, scenario_to_sotopia(log.setup.scenario), [character_to_sotopia(c) for c in log.setup.characters]


# -- episodes: SOTOPIA -> ours ------------------------------------------------------------------------


def _turns(messages: Any, names: list[str], what: str, field: str = "messages") -> list[Turn]:
    if not isinstance(messages, list):
        raise SotopiaFormatError(f"{what}: field '{field}': expected a list of turns")
    turns = []
    for number, row in enumerate(messages):
        acts: list[tuple[str, str]] = []
        for entry in row if isinstance(row, list) else [None]:
            if not isinstance(entry, list | tuple) or len(entry) != 3:
                raise SotopiaFormatError(f"{what}: field '{field}.{number}': expected [sender, receiver, message]")
            sender, receiver, text = (str(x) for x in entry)
            if receiver == ENV and sender != ENV:
                acts.append((sender, text))
        if len(acts) > 1:
            real = [a for a in acts if a[1] != "did nothing"]
            if real:
                acts = real
            else:  # everyone "did nothing": the round-robin agent of this turn chose none
                expected = names[number % len(names)] if names else acts[0][0]
                acts = [a for a in acts if a[0] == expected][:1] or acts[:1]
        for sender, text in acts:
            try:
                action = message_to_action(text)
            except SotopiaFormatError as exc:
                raise SotopiaFormatError(f"{what}: field '{field}.{number}': {exc}") from None
            turns.append(Turn(turn=number, agent=sender, action=action))
    return turns


def _dimension_reasoning(reasoning: str, seat: int) -> dict[str, str]:
    """``{dimension: reasoning}`` from the ``Agent <seat> comments:`` section of SOTOPIA's reasoning."""
    match = re.search(rf"(?ms)^Agent {seat} comments:\s*\n(.*?)(?=^Agent \d+ comments:|\Z)", reasoning or "")
    out: dict[str, str] = {}
    for line in (match.group(1) if match else "").splitlines():
        dim, sep, text = line.partition(":")
        if sep and dim.strip() in DIMENSIONS:
            out[dim.strip()] = text.strip()
    return out


def _placeholder(rewards: list[Any], tables: list[dict[str, Any]], reasoning: str) -> bool:
    """SOTOPIA's stand-in for a rating it could not get: every reward exactly 0 (a bare ``0.0``, or all
    scores 0) and no reasoning. A real judge that gives all zeros still says why."""

    def zero(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and value == 0

    def zero_reward(reward: Any, table: dict[str, Any]) -> bool:
        if zero(reward):
            return True
        pair = isinstance(reward, list | tuple) and len(reward) == 2
        return pair and zero(reward[0]) and all(zero(v) for v in table.values())

    return not reasoning.strip() and all(zero_reward(r, t) for r, t in zip(rewards, tables, strict=True))


def _rating(d: Mapping[str, Any], names: list[str], evaluator: str, what: str) -> EpisodeRating:
    rewards = d.get("rewards") or []
    if not isinstance(rewards, list) or len(rewards) != len(names):
        raise SotopiaFormatError(f"{what}: field 'rewards': expected one entry per agent ({len(names)})")
    tables = [r[1] if isinstance(r, list | tuple) and len(r) == 2 and isinstance(r[1], dict) else {} for r in rewards]
    if _placeholder(rewards, tables, str(d.get("reasoning") or "")):
        return EpisodeRating(evaluator=evaluator, error=NO_RATINGS)
    if all(set(DIMENSIONS) <= set(t) for t in tables):
        dims = DIMENSIONS
    elif all("goal" in t for t in tables):
        dims = ("goal",)
    else:
        return EpisodeRating(evaluator=evaluator, error=NO_RATINGS)
    ratings = {}
    for seat, (name, table) in enumerate(zip(names, tables, strict=True), 1):
        notes = _dimension_reasoning(str(d.get("reasoning") or ""), seat)
        try:
            scores = {dim: DimensionScore(score=round(float(table[dim])), reasoning=notes.get(dim, "")) for dim in dims}
        except (TypeError, ValueError):
            raise SotopiaFormatError(f"{what}: field 'rewards.{seat - 1}': scores must be numbers") from None
        ratings[name] = AgentRating(scores=scores)
    return EpisodeRating(evaluator=evaluator, ratings=ratings)


def _termination(reasoning: str) -> str | None:
    match = re.search(r"Environment comments: terminated: ([^;\n]*)", reasoning or "")
    return match.group(1).strip() if match else None


def _lookup(table: Mapping[str, Mapping[str, Any]], pk: str, kind: str, what: str) -> Mapping[str, Any]:
    if pk not in table:
        raise SotopiaFormatError(f"{what}: {kind} {pk!r} is not among the {kind} profiles given")
    return table[pk]


def episode_from_sotopia(
    d: Mapping[str, Any],
    env_by_pk: Mapping[str, Mapping[str, Any]],
    agents_by_pk: Mapping[str, Mapping[str, Any]],
    relationships: Sequence[RelationshipProfile] = (),
    agent_class: str = "LLMAgent",
    messages_field: str = "messages",
) -> EpisodeLog:
    """One SOTOPIA EpisodeLog dict as ours (see ``episodes_from_sotopia``); ``messages_field`` names the
    field the ``messages`` came from in errors."""
    pk = str(d.get("pk") or uuid.uuid4().hex)
    what = f"SOTOPIA episode {pk!r}"
    scenario = scenario_from_sotopia(_lookup(env_by_pk, str(d.get("environment")), "environment", what))
    characters = [character_from_sotopia(_lookup(agents_by_pk, str(a), "agent", what)) for a in d.get("agents") or []]
    ids = [c.id for c in characters]
    relationship = next((r for r in relationships if len(ids) == 2 and r.involves(*ids)), None)
    setup = EpisodeSetup(scenario=scenario, characters=characters, relationship=relationship)
    names = setup.agent_names
    models = [str(m) for m in d.get("models") or []]
    seat_models = [models[i + 1] if i + 1 < len(models) else "" for i in range(len(names))]
    rating = _rating(d, names, models[0] if models and models[0] else "sotopia", what)
    return EpisodeLog(
        id=pk,
        tag=str(d.get("tag") or ""),
        combo_key=combo_key(setup, seat_models),
        setup=setup,
        agents=[AgentSpec(name=n, model=m, agent_class=agent_class) for n, m in zip(names, seat_models, strict=True)],
        turns=_turns(d.get("messages") or [], names, what, messages_field),
        termination_reason=_termination(str(d.get("reasoning") or "")),
        rating=rating,
        status="rated" if rating.rated else "unrated",
    )


def episodes_from_sotopia(
    episode_dicts: Iterable[Mapping[str, Any]],
    env_by_pk: Mapping[str, Mapping[str, Any]],
    agents_by_pk: Mapping[str, Mapping[str, Any]],
    relationships: Iterable[Mapping[str, Any] | RelationshipProfile] = (),
    agent_class: str = "LLMAgent",
) -> list[EpisodeLog]:
    """SOTOPIA EpisodeLog dicts as our EpisodeLogs, given the profiles they reference (keyed by SOTOPIA pk).

    Rewards become a full SOTOPIA-EVAL rating when every agent has all seven
    dimensions, a goal-only rating when every agent has ``goal``, and otherwise
    an unrated episode with the error "imported SOTOPIA episode has no ratings"
    (never zeros).
    """
    rels = [r if isinstance(r, RelationshipProfile) else relationship_from_sotopia(r) for r in relationships]
    return [episode_from_sotopia(d, env_by_pk, agents_by_pk, rels, agent_class) for d in episode_dicts]


# -- JSONL --------------------------------------------------------------------------------------------


def numbered_rows(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """``(file:line, object)`` for each non-blank line; SotopiaFormatError naming ``file:line`` on a bad one."""
    return list(json_lines(path, SotopiaFormatError))


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (any of SOTOPIA's record types), unconverted."""
    return [row for _, row in numbered_rows(path)]


def write_jsonl(rows: Iterable[Mapping[str, Any]], path: str | Path) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def _convert(path: str | Path, convert: Callable[[dict[str, Any]], T]) -> list[T]:
    out = []
    for where, row in numbered_rows(path):
        try:
            out.append(convert(row))
        except SotopiaFormatError as exc:
            raise SotopiaFormatError(f"{where}: {exc}") from None
    return out


def read_agent_profiles(path: str | Path) -> list[Character]:
    return _convert(path, character_from_sotopia)


def read_environment_profiles(path: str | Path, split: str = "train") -> list[Scenario]:
    return _convert(path, lambda row: scenario_from_sotopia(row, split))


def read_relationship_profiles(path: str | Path) -> list[RelationshipProfile]:
    return _convert(path, relationship_from_sotopia)


def read_episodes(
    path: str | Path,
    env_by_pk: Mapping[str, Mapping[str, Any]],
    agents_by_pk: Mapping[str, Mapping[str, Any]],
    relationships: Sequence[RelationshipProfile] = (),
    agent_class: str = "LLMAgent",
) -> list[EpisodeLog]:
    return _convert(path, lambda row: episode_from_sotopia(row, env_by_pk, agents_by_pk, relationships, agent_class))


def write_agent_profiles(characters: Iterable[Character], path: str | Path) -> int:
    return write_jsonl((character_to_sotopia(c) for c in characters), path)


def write_environment_profiles(scenarios: Iterable[Scenario], path: str | Path) -> int:
    return write_jsonl((scenario_to_sotopia(s) for s in scenarios), path)


def write_relationship_profiles(relationships: Iterable[RelationshipProfile], path: str | Path) -> int:
    return write_jsonl((relationship_to_sotopia(r) for r in relationships), path)


def export_sotopia(logs: Iterable[EpisodeLog], directory: str | Path, include_unrated: bool = False) -> dict[str, Path]:
    """Write ``episodes.jsonl`` and the profiles they reference (deduplicated by pk) into ``directory``.

    Unrated and failed episodes are left out unless ``include_unrated``: SOTOPIA
    would read their placeholder reward 0.0 as a score.
    """
    directory = Path(directory)
    episodes: list[dict[str, Any]] = []
    envs: dict[str, dict[str, Any]] = {}
    agents: dict[str, dict[str, Any]] = {}
    rels: dict[str, dict[str, Any]] = {}
    for log in logs:
        if log.status != "rated" and not include_unrated:
            continue
        episode, env, agent_dicts = episode_to_sotopia(log)
        episodes.append(episode)
        envs.setdefault(env["pk"], env)
        agents.update({a["pk"]: a for a in agent_dicts})
        if log.setup.relationship is not None:
            rel = relationship_to_sotopia(log.setup.relationship)
            rels.setdefault(rel["pk"], rel)
    paths = {kind: directory / name for kind, name in FILES.items()}
    write_jsonl(agents.values(), paths["agents"])
    write_jsonl(envs.values(), paths["environments"])
    write_jsonl(rels.values(), paths["relationships"])
    write_jsonl(episodes, paths["episodes"])
    return paths


def import_sotopia(directory: str | Path, agent_class: str = "LLMAgent") -> list[EpisodeLog]:
    """Read a directory laid out as ``export_sotopia`` writes it (relationship_profiles.jsonl optional)."""
    directory = Path(directory)
    envs = {str(r.get("pk")): r for r in read_jsonl(directory / FILES["environments"])}
    agents = {str(r.get("pk")): r for r in read_jsonl(directory / FILES["agents"])}
    rel_path = directory / FILES["relationships"]
    rels = read_relationship_profiles(rel_path) if rel_path.exists() else []
    return read_episodes(directory / FILES["episodes"], envs, agents, rels, agent_class)
