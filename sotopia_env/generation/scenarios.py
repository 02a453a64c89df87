"""Scenarios from seed situations, SOTOPIA-π style: one LLM call per seed, with library few-shot examples.

For each fresh seed (input repeats dropped, seeds recorded in ``DIR/.used_seeds.jsonl`` skipped) the model
is shown one or two train-split library scenarios and asked, as schema-constrained JSON, for a new
scenario with exactly two goals in tension, a relationship and optional age constraints. The reply must
validate as a ``Scenario``, have two distinct goals, and fit at least one pair of library characters
(relationship and constraints). Near-copies of library or earlier generated scenarios are rejected (see
``similarity``). Each accepted scenario is written to ``DIR/<id>.yaml`` (tag ``generated``, ``source`` the
seed) and its seed recorded; generated scenarios never go into the ``test`` split.
"""

from __future__ import annotations

import json
import random
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sotopia_env.backends.base import Backend
from sotopia_env.generation.core import (
    GenerationStats,
    InvalidGeneration,
    OnOutcome,
    OnStart,
    Outcome,
    RunSettings,
    generate_valid,
    load_json_object,
    run_bounded,
    slug,
    unique_id,
    write_yaml,
)
from sotopia_env.generation.seeds import Seed, UsedSeeds, dedupe
from sotopia_env.generation.similarity import DUPLICATE_THRESHOLD, NearDuplicateIndex, jaccard, scenario_text, shingles
from sotopia_env.library import Library
from sotopia_env.profiles import Relationship, Scenario
from sotopia_env.sampler import eligible_setups
from sotopia_env.validation import field_problem

GENERATED_TAG = "generated"
ALLOWED_SPLITS = ("train", "dev")
RELATIONSHIPS = [r.name for r in Relationship]

SYSTEM = (
    "You write scenarios for a social simulation in which two AI agents role-play two people who meet and talk. "
    "A scenario is a short, concrete situation (two to four sentences, third person, no names: say 'one person', "
    "'a neighbour', 'the other') and one private social goal per person, written in the second person "
    "('Convince the other to ...'). The two goals must be in tension: both cannot be fully achieved, so the two "
    "people have to negotiate, persuade or compromise. A goal may end with <extra_info>facts only that person "
    "knows</extra_info>. 'relationship' is how well the two know each other, one of: "
    f"{', '.join(RELATIONSHIPS)}. 'constraints' is null, or two age ranges (one per person, in goal order) when "
    "the situation needs them, e.g. an adult. Answer with one JSON object only."
)


def scenario_schema() -> dict[str, Any]:
    """The JSON schema of a reply (ids, source, split and tags are ours, not the model's)."""
    age = {"type": "integer", "minimum": 0, "maximum": 120}
    seat = {
        "type": "object",
        "properties": {"min_age": age, "max_age": age},
        "required": ["min_age", "max_age"],
        "additionalProperties": False,
    }
    seats = {"type": "array", "items": seat, "minItems": 2, "maxItems": 2}
    return {
        "type": "object",
        "properties": {
            "codename": {"type": "string", "minLength": 3, "maxLength": 40},
            "scenario": {"type": "string", "minLength": 40, "maxLength": 500},
            "goals": {
                "type": "array",
                "items": {"type": "string", "minLength": 20, "maxLength": 300},
                "minItems": 2,
                "maxItems": 2,
            },
            "relationship": {"type": "string", "enum": RELATIONSHIPS},
            "constraints": {"anyOf": [{"type": "null"}, seats]},
        },
        "required": ["codename", "scenario", "goals", "relationship", "constraints"],
        "additionalProperties": False,
    }


def example_json(scenario: Scenario) -> str:
    """A library scenario in the reply format."""
    constraints = [{"min_age": c.min_age, "max_age": c.max_age} for c in scenario.constraints or []] or None
    reply = {
        "codename": scenario.codename,
        "scenario": scenario.scenario,
        "goals": scenario.goals,
        "relationship": scenario.relationship.name,
        "constraints": constraints,
    }
    return json.dumps(reply, ensure_ascii=False)


def scenario_messages(seed: Seed, examples: list[Scenario]) -> list[dict[str, str]]:
    shown = "\n\n".join(example_json(s) for s in examples)
    user = (
        f"Examples of good scenarios:\n\n{shown}\n\n"
        "Write a new scenario inspired by the situation below. Keep its spirit, turn it into a conflict between "
        "two people's goals, and do not copy the examples.\n\n"
        f"Situation: {seed.text}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def example_pool(library: Library) -> list[Scenario]:
    """Few-shot candidates: built-in train-split scenarios (never test), in a stable order."""
    pool = [s for s in library.select("train") if GENERATED_TAG not in s.tags]  # never the verifiable family
    return sorted(pool, key=lambda s: s.id) or sorted(library.scenarios.values(), key=lambda s: s.id)


def parse_scenario(text: str, seed: Seed, split: str, library: Library) -> Scenario:
    """A valid, pairable scenario from a reply, with a provisional id; InvalidGeneration otherwise."""
    data = load_json_object(text)
    goals = data.get("goals")
    if not isinstance(goals, list) or len(goals) != 2:
        count = len(goals) if isinstance(goals, list) else 0
        raise InvalidGeneration(f"expected exactly two goals, got {count}")
    codename = slug(str(data.get("codename") or ""), sep="_") or slug(str(data.get("scenario", "")), sep="_")
    entry = {
        "id": f"gen-{slug(codename) or 'scenario'}-{seed.key[:8]}",
        "codename": codename or "generated",
        "scenario": data.get("scenario"),
        "goals": goals,
        "relationship": data.get("relationship"),
        "constraints": data.get("constraints") or None,
        "source": seed.label,
        "tags": [GENERATED_TAG],
        "split": split,
    }
    try:
        scenario = Scenario.model_validate(entry)
    except (ValidationError, ValueError) as exc:
        problem = field_problem(exc) if isinstance(exc, ValidationError) else str(exc)
        raise InvalidGeneration(problem) from None
    if jaccard(shingles(scenario.goals[0]), shingles(scenario.goals[1])) >= DUPLICATE_THRESHOLD:
        raise InvalidGeneration("the two goals are the same; they must be in tension")
    if not eligible_setups(scenario, library):
        raise InvalidGeneration(
            f"no library characters fit relationship {scenario.relationship.name!r} and the age constraints"
        )
    return scenario


def scenario_entry(scenario: Scenario) -> dict[str, Any]:
    """The YAML entry, relationship by name, in the library's field order."""
    entry: dict[str, Any] = {
        "id": scenario.id,
        "codename": scenario.codename,
        "scenario": scenario.scenario,
        "goals": list(scenario.goals),
        "relationship": scenario.relationship.name,
    }
    if scenario.constraints:
        entry["constraints"] = [c.model_dump(exclude_none=True) for c in scenario.constraints]
    entry.update(tags=list(scenario.tags), split=scenario.split, source=scenario.source)
    return entry


class _ScenarioRun:
    """The state one run shares between its concurrent jobs (no awaits between check and accept)."""

    def __init__(
        self, backend: Backend, library: Library, out_dir: Path, split: str, settings: RunSettings, threshold: float
    ) -> None:
        self.backend = backend
        self.library = library
        self.out_dir = out_dir
        self.split = split
        self.settings = settings
        self.used = UsedSeeds(out_dir)
        self.taken = set(library.scenarios)
        self.index = NearDuplicateIndex(threshold)
        for s in library.scenarios.values():
            self.index.add(s.id, scenario_text(s))

    async def job(self, seed: Seed, examples: list[Scenario], request_seed: int) -> Outcome:
        parse = partial(parse_scenario, seed=seed, split=self.split, library=self.library)
        messages = scenario_messages(seed, examples)
        scenario, error, attempts = await generate_valid(
            self.backend, messages, scenario_schema(), parse, self.settings, request_seed
        )
        if scenario is None:
            return Outcome("failed", detail=f"{seed.label}: {error}", attempts=attempts)
        return self.accept(seed, scenario, attempts)

    def accept(self, seed: Seed, scenario: Scenario, attempts: int) -> Outcome:
        duplicate = self.index.match(scenario_text(scenario))
        if duplicate is not None:
            self.used.add(seed, "duplicate", None, self.backend.model)
            detail = f"near-copy of {duplicate[0]} (similarity {duplicate[1]:.2f})"
            return Outcome("duplicate", detail=detail, attempts=attempts)
        scenario = scenario.model_copy(update={"id": unique_id(scenario.id, self.taken)})
        self.index.add(scenario.id, scenario_text(scenario))
        header = f"Generated by sotopia-env scenarios generate (model {self.backend.model}).\nSeed: {seed.label}"
        path = write_yaml(self.out_dir / f"{scenario.id}.yaml", "scenarios", [scenario_entry(scenario)], header)
        self.used.add(seed, "generated", scenario.id, self.backend.model)
        return Outcome("generated", item_id=scenario.id, attempts=attempts, path=path)


async def generate_scenarios(
    backend: Backend,
    seeds: list[Seed],
    n: int,
    out_dir: str | Path,
    library: Library,
    *,
    split: str = "train",
    examples: int = 2,
    settings: RunSettings | None = None,
    threshold: float = DUPLICATE_THRESHOLD,
    on_start: OnStart | None = None,
    on_outcome: OnOutcome | None = None,
) -> GenerationStats:
    """Turn up to ``n`` fresh seeds into scenario files under ``out_dir``; returns the counts.

    ``library`` is the reference: few-shot examples, duplicate checks, id clashes and pairing all use it
    (pass the built-in library plus whatever ``out_dir`` already holds). Same seed, same prompts.
    """
    if split not in ALLOWED_SPLITS:
        raise ValueError(f"generated scenarios may go into {' or '.join(ALLOWED_SPLITS)}, not {split!r}")
    if not 1 <= examples <= 2:
        raise ValueError("examples must be 1 or 2")
    settings = settings or RunSettings()
    out = Path(out_dir)
    run = _ScenarioRun(backend, library, out, split, settings, threshold)
    stats = GenerationStats()
    unique, stats.repeated_seeds = dedupe(seeds)
    fresh = [s for s in unique if s not in run.used]
    stats.reused_seeds = len(unique) - len(fresh)
    chosen = fresh[: max(0, n)]
    stats.requested = len(chosen)
    rng = random.Random(settings.seed)
    pool = example_pool(library)
    jobs = []
    for seed in chosen:
        shots = rng.sample(pool, min(examples, len(pool)))
        jobs.append(partial(run.job, seed, shots, rng.randrange(2**31)))
    if on_start is not None:
        on_start(len(jobs))
    await run_bounded(jobs, settings.concurrency, stats, on_outcome)
    return stats
