"""Protocol cards: what makes two results comparable, derived from the stored episodes themselves.

A result (the episodes of one tag that were played and judged the same way) has a ``ProtocolCard``:

- ``scenario_ids`` and ``scenarios_sha256``: the scenario set, and a sha256 of the scenarios' definitions (each
  scenario's JSON with sorted keys), so an edited scenario text is a different card under the same id;
- ``setups`` and ``setups_sha256``: how many distinct setups were played and a sha256 of their characters per seat
  and relationship profiles (what ``--seed`` drew from the library, or what an import fixed);
- ``judge`` and ``judge_sha256``: the evaluator's name (``llm:MODEL``, ``verifiable``, ``rule-based``) and a sha256
  of what decides its scores besides the model: for an LLM judge its prompt template (``judge_template``: the
  prompt of a placeholder episode, with the JSON schema it constrains replies to); for a rule judge the source
  of the modules that hold its rules (its ``rule_modules``, e.g. every rule set the verifiable judge knows; else
  its class's module);
- ``prompts``: the prompts the seats were prompted with (``prompt_record``: the name in ``sotopia_env.prompt``
  and a sha256 of its template, the messages of a placeholder observation), so results under different prompts
  (SOTOPIA's for API models, ``chat`` for small local ones, ``tools`` for a TRL-trained policy's tool calls, with
  the tools' schemas in its hash) are never compared;
- ``dimensions``, the env ``seeds`` (each episode's reset seed), ``max_turns``, ``stale_turns``,
  ``max_agent_errors`` and ``action_order``;
- ``version``: the sotopia-env that played the episodes.

``card.id`` is a short hash of all of it. Each episode records its part of the card when it is played and rated
(``EpisodeLog.protocol``, next to its ``seed`` and ``action_order``), so ``group_by_card`` can sort any stored
episodes by card. Episodes stored before that record existed (or imported from SOTOPIA) have None in those
fields: they land on cards of their own, never on a card of episodes that recorded theirs.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any, Generic, TypeVar
from weakref import WeakKeyDictionary

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_serializer

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.env import EnvConfig
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.judge_agreement import AgreementFigure
from sotopia_env.episodes.log import EpisodeLog, EpisodeProtocol
from sotopia_env.evaluators import EpisodeContext, Evaluator
from sotopia_env.evaluators.llm import LLMEvaluator, evaluation_prompt, rating_schema
from sotopia_env.observation import HistoryEntry, Observation, background_for, labels_for
from sotopia_env.profiles import BigFive, Character, Scenario
from sotopia_env.prompt import PROMPTS, render_prompt
from sotopia_env.tool_calls import TOOLS, tool_schemas
from sotopia_env.transcript import Turn

T = TypeVar("T")
ID_CHARS = 12


def sha256_json(data: Any) -> str:
    """The sha256 of ``data`` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ProtocolCard(BaseModel):
    """What a result was measured under; only results with equal cards are compared (module docstring)."""

    model_config = ConfigDict(frozen=True)

    scenario_ids: list[str]
    scenarios_sha256: str
    setups: int
    setups_sha256: str
    judge: str | None
    judge_sha256: str | None
    dimensions: list[str] | None
    prompts: list[str] | None = None
    seeds: list[int]
    max_turns: int | None
    stale_turns: int | None
    max_agent_errors: int | None
    action_order: str
    version: str | None
    # What the judge's agreement with other judges, and its seat bias, measured (``episodes evaluate --judge``):
    # a figure about the judge, not part of the protocol, so not in ``id``.
    judge_agreement: list[AgreementFigure] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def id(self) -> str:
        """A short hash of every other field (the judge's agreement figures aside)."""
        return sha256_json(self.model_dump(include=set(type(self).model_fields) - {"judge_agreement"}))[:ID_CHARS]

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: Any) -> dict[str, Any]:
        data = handler(self)  # a card without figures dumps as it did before they existed
        if not data.get("judge_agreement"):
            data.pop("judge_agreement", None)
        return data

    def with_agreement(self, figures: Iterable[AgreementFigure]) -> ProtocolCard:
        """The card carrying the figures measured for the judge it pins (same name and prompt hash)."""
        mine = [f for f in figures if f.judge == self.judge and f.judge_sha256 == self.judge_sha256]
        return self.model_copy(update={"judge_agreement": mine}) if mine else self

    def summary(self) -> list[tuple[str, str]]:
        """The card as (label, text) lines: the block ``report``, ``benchmark``, ``leaderboard`` and the viewer show."""
        from sotopia_env.episodes.sotopia_protocol import protocol_named

        named = protocol_named(self.scenario_ids)
        scenarios = f"({named})" if named else _first(self.scenario_ids, 2)
        limits = f"max turns {_known(self.max_turns)} · stale {_known(self.stale_turns)}"
        return [
            ("card", self.id),
            ("scenarios", f"{len(self.scenario_ids)} {scenarios} · {_short(self.scenarios_sha256)}"),
            ("setups", f"{self.setups} · {_short(self.setups_sha256)}"),
            ("judge", f"{self.judge or 'none'} · {_short(self.judge_sha256)}"),
            ("dimensions", "?" if self.dimensions is None else ", ".join(self.dimensions) or "none"),
            ("prompts", "?" if self.prompts is None else ", ".join(self.prompts) or "none"),
            ("play", f"{limits} · agent errors {_known(self.max_agent_errors)} · {self.action_order}"),
            ("seeds", _first(list(map(str, self.seeds)), 8) or "?"),
            ("version", f"sotopia-env {_known(self.version)}"),
            *(("agreement", figure.line()) for figure in self.judge_agreement),
        ]


def _first(items: list[str], n: int) -> str:
    return ", ".join(items[:n]) + (", …" if len(items) > n else "")


def _known(value: object) -> str:
    return "?" if value is None else str(value)


def _short(digest: str | None) -> str:
    return "sha256 ?" if digest is None else f"sha256 {digest[:ID_CHARS]}"


# -- what an episode records ------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def package_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sotopia-env")
    except PackageNotFoundError:
        return None


def played_under(config: EnvConfig, agents: Iterable[object] | None = None) -> EpisodeProtocol:
    """An episode's record of how it was played (``episodes.runner.play``); ``agents`` (None: not known) give
    the prompts: an agent's ``prompt`` attribute when it names one of ``sotopia_env.prompt.PROMPTS``."""
    prompts = None
    if agents is not None:
        named = {getattr(agent, "prompt", None) for agent in agents}
        prompts = sorted(prompt_record(p) for p in named if isinstance(p, str) and p in PROMPTS)
    return EpisodeProtocol(
        version=package_version(),
        max_turns=config.max_turns,
        stale_turns=config.stale_turns,
        max_agent_errors=config.max_agent_errors,
        prompts=prompts,
    )


@cache
def prompt_record(prompt: str) -> str:
    """``NAME@HASH``: a prompt's name and the first characters of the sha256 of its template (the messages it
    renders for a placeholder observation, one past turn of each kind), so an edited prompt is a new record."""
    template: Any = render_prompt(_placeholder_observation(), prompt)
    if prompt == TOOLS:  # the tools' schemas are part of what the model sees
        template = {"messages": template, "tools": tool_schemas()}
    return f"{prompt}@{sha256_json(template)[:ID_CHARS]}"


@lru_cache(maxsize=1)
def _placeholder_observation() -> Observation:
    context = _placeholder_context()
    setup, seat = context.setup, 0
    labels = labels_for(setup, seat)
    history = [
        HistoryEntry(
            turn=t.turn, agent=labels[t.agent], action_type=t.action.action_type.value, argument=t.action.argument
        )
        for t in context.turns
    ]
    return Observation(
        agent=setup.agent_names[seat],
        turn=len(history),
        background=background_for(setup, seat),
        history=history,
        available_actions=[a.value for a in ActionType],
        text="{text}",
        topic=setup.scenario.topic,
    )


def judged_by(record: EpisodeProtocol | None, evaluator: Evaluator) -> EpisodeProtocol:
    """``record`` with the judge's part filled in (``episodes.runner.rate``)."""
    judge = {
        "judge": evaluator.name,
        "judge_sha256": judge_sha256(evaluator),
        "dimensions": [d.name for d in evaluator.dimensions],
    }
    return (record or EpisodeProtocol()).model_copy(update=judge)


_judge_hashes: WeakKeyDictionary[Any, str] = WeakKeyDictionary()


def judge_sha256(evaluator: Evaluator) -> str:
    """The sha256 of an LLM judge's prompt template (``judge_template``), or of a rule judge's rules."""
    try:
        return _judge_hashes[evaluator]
    except (KeyError, TypeError):
        pass
    if isinstance(evaluator, LLMEvaluator):
        digest = sha256_json(judge_template(evaluator))
    else:
        cls = type(evaluator)
        modules = getattr(evaluator, "rule_modules", None) or (cls.__module__,)
        digest = sha256_json([_source(m, cls) for m in modules])
    try:
        _judge_hashes[evaluator] = digest
    except TypeError:  # an evaluator that takes no weak reference is hashed again next time
        pass
    return digest


def _source(module: str, cls: type) -> str:
    try:
        return inspect.getsource(importlib.import_module(module))
    except (OSError, TypeError, ImportError):  # defined where no source is kept (a notebook, __main__)
        return f"{cls.__module__}.{cls.__qualname__}"


def judge_template(evaluator: LLMEvaluator) -> dict[str, Any]:
    """An LLM judge's prompt for a placeholder episode (every field a ``{placeholder}``, one turn of each kind),
    with the JSON schema it constrains replies to: its template, whatever episode it rates."""
    dims = evaluator.dimensions
    return {
        "messages": evaluation_prompt(_placeholder_context(), dims, evaluator.seat_order(2)),
        "schema": rating_schema(2, dims, evaluator.max_reasoning) if evaluator.constrained else None,
    }


@lru_cache(maxsize=1)
def _placeholder_context() -> EpisodeContext:
    def character(seat: int) -> Character:
        return Character(
            id=f"seat-{seat}",
            first_name=f"{{first name {seat}}}",
            last_name=f"{{last name {seat}}}",
            age=30,
            gender="{gender}",
            pronouns="{pronouns}",
            occupation="{occupation}",
            public_info="{public info}",
            big_five=BigFive(**dict.fromkeys(BigFive.model_fields, "{level}")),
            moral_values=["{moral value}"],
            schwartz_values=["{value}"],
            decision_making_style="{decision-making style}",
            secret="{secret}",
        )

    scenario = Scenario(
        id="placeholder",
        codename="{codename}",
        scenario="{scenario text}",
        goals=["{goal 1}", "{goal 2}"],
        relationship=0,
    )
    setup = EpisodeSetup(scenario=scenario, characters=[character(1), character(2)])
    names = setup.agent_names
    turns = [
        Turn(turn=t, agent=names[t % 2], action=AgentAction(action_type=kind, argument=f"{{{kind.value}}}"))
        for t, kind in enumerate(ActionType)
    ]
    return EpisodeContext(setup=setup, turns=turns, termination_reason="{termination reason}")


# -- cards from episodes ----------------------------------------------------------------------------------


_PROMPTS = 3  # where ``episode_key`` holds the prompts


def episode_key(log: EpisodeLog) -> tuple[Any, ...]:
    """The card fields one episode decides alone (all but the scenario set, the setups and the seeds)."""
    record = log.protocol or EpisodeProtocol()
    judge = record.judge or (log.rating.evaluator if log.rating is not None else None)
    dims = record.dimensions or _rated_dimensions(log)
    return (
        judge,
        record.judge_sha256,
        tuple(dims) if dims is not None else None,
        tuple(record.prompts) if record.prompts is not None else None,
        record.max_turns,
        record.stale_turns,
        record.max_agent_errors,
        log.action_order,
        record.version,
    )


def _rated_dimensions(log: EpisodeLog) -> list[str] | None:
    """An episode without a protocol record: the dimensions its ratings hold."""
    ratings = log.rating.ratings if log.rating is not None else None
    return list(next(iter(ratings.values())).scores) if ratings else None


@dataclass
class _Parts:
    """What a card takes from all of a result's episodes."""

    scenarios: set[tuple[str, str]] = field(default_factory=set)  # (id, sha256 of its definition)
    setups: set[str] = field(default_factory=set)
    seeds: set[int] = field(default_factory=set)

    def add(self, log: EpisodeLog) -> None:
        setup = log.setup
        self.scenarios.add((setup.scenario.id, sha256_json(setup.scenario.model_dump(mode="json", exclude_none=True))))
        cast = setup.model_dump(mode="json", exclude={"scenario"}, exclude_none=True)
        self.setups.add(sha256_json([setup.scenario.id, cast]))
        if log.seed is not None:
            self.seeds.add(log.seed)

    def merge(self, other: _Parts) -> None:
        self.scenarios |= other.scenarios
        self.setups |= other.setups
        self.seeds |= other.seeds

    def card(self, key: tuple[Any, ...]) -> ProtocolCard:
        judge, judge_hash, dims, prompts, max_turns, stale_turns, max_errors, order, version = key
        return ProtocolCard(
            scenario_ids=sorted({sid for sid, _ in self.scenarios}),
            scenarios_sha256=sha256_json(sorted(self.scenarios)),
            setups=len(self.setups),
            setups_sha256=sha256_json(sorted(self.setups)),
            judge=judge,
            judge_sha256=judge_hash,
            dimensions=None if dims is None else list(dims),
            prompts=None if prompts is None else list(prompts),
            seeds=sorted(self.seeds),
            max_turns=max_turns,
            stale_turns=stale_turns,
            max_agent_errors=max_errors,
            action_order=order,
            version=version,
        )


@dataclass
class CardGroup(Generic[T]):
    """The results that share one card: their tags, and what ``group_by_card`` kept of each episode."""

    card: ProtocolCard
    tags: list[str] = field(default_factory=list)
    items: list[T] = field(default_factory=list)


def group_by_card(logs: Iterable[EpisodeLog], keep: Callable[[EpisodeLog], T]) -> list[CardGroup[T]]:
    """Episodes grouped by protocol card, ``keep(log)`` of each (what is kept, not the logs: a store can be large).

    A result is the episodes of one tag with one ``episode_key``; its card adds their scenario set, setups and
    seeds. Results with equal cards (several tags of one protocol) share a group. Groups come largest first.
    Failed episodes whose agents were never built (so their prompts are not known) join the one result of their
    tag that differs from them in prompts alone, where there is one.
    """
    parts: dict[tuple[str, tuple[Any, ...]], _Parts] = {}
    kept: dict[tuple[str, tuple[Any, ...]], list[T]] = {}
    unbuilt: set[tuple[str, tuple[Any, ...]]] = set()  # results of failed episodes alone, prompts unknown
    for log in logs:
        key = (log.tag, episode_key(log))
        if key not in parts and log.status == "failed" and key[1][_PROMPTS] is None:
            unbuilt.add(key)
        elif log.status != "failed" or key[1][_PROMPTS] is not None:
            unbuilt.discard(key)
        parts.setdefault(key, _Parts()).add(log)
        kept.setdefault(key, []).append(keep(log))
    for key in unbuilt:
        homes = [k for k in parts if k not in unbuilt and k[0] == key[0] and _but_prompts(k) == _but_prompts(key)]
        if len(homes) == 1:
            parts[homes[0]].merge(parts.pop(key))
            kept[homes[0]].extend(kept.pop(key))
    groups: dict[str, CardGroup[T]] = {}
    for (tag, key), part in parts.items():
        card = part.card(key)
        group = groups.setdefault(card.id, CardGroup(card))
        if tag not in group.tags:
            group.tags.append(tag)
        group.items.extend(kept[(tag, key)])
    return sorted(groups.values(), key=lambda g: (-len(g.items), g.card.id))


def _but_prompts(key: tuple[str, tuple[Any, ...]]) -> tuple[Any, ...]:
    return key[1][:_PROMPTS] + key[1][_PROMPTS + 1 :]


def cards_of(logs: Iterable[EpisodeLog]) -> list[ProtocolCard]:
    """The cards of ``logs`` (one, unless they were played or judged in more than one way)."""
    return [group.card for group in group_by_card(logs, lambda log: None)]
