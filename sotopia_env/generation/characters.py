"""New characters from an LLM, varied on purpose.

Each request is steered with attributes drawn from the run's RNG: an age band, a gender (with pronouns),
an occupation field, two personality traits and a theme for the secret. Age band and gender are also
forced by the JSON schema, so even a tiny model spreads out. The reply must validate as a ``Character``.
A character is rejected as a duplicate when its full name is already taken, or when its public info plus
secret is a near-copy (see ``similarity``) of a known character's. Each accepted character is written to
``DIR/<id>.yaml``; ids (``gen-<first>-<last>``) never clash with the library.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
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
from sotopia_env.generation.similarity import DUPLICATE_THRESHOLD, NearDuplicateIndex, character_text
from sotopia_env.library import Library
from sotopia_env.profiles import BigFive, Character
from sotopia_env.validation import field_problem

AGE_BANDS = [(16, 20), (21, 30), (31, 45), (46, 60), (61, 85)]
GENDERS = [("woman", "she/her", 45), ("man", "he/him", 45), ("nonbinary", "they/them", 10)]
OCCUPATION_FIELDS = [
    "healthcare", "education", "skilled trades", "the arts", "technology", "hospitality and food",
    "law", "agriculture", "retail and sales", "public service", "science and research", "finance",
    "transport and logistics", "sports and fitness", "media", "social work", "construction",
    "emergency services", "small business", "religion and community work",
]  # fmt: skip
LEVELS = ["very low", "low", "moderately low", "moderate", "moderately high", "high", "very high"]
TRAITS = list(BigFive.model_fields)
MORAL_VALUES = ["care", "fairness", "loyalty", "authority", "sanctity", "liberty"]
SCHWARTZ_VALUES = [
    "achievement", "security", "benevolence", "self-direction", "universalism",
    "tradition", "stimulation", "power", "hedonism", "conformity",
]  # fmt: skip
DECISION_STYLES = ["analytical", "behavioral", "directive", "conceptual"]
SECRET_THEMES = ["money", "health", "family", "work", "the past", "a relationship", "the law", "an ambition"]

SYSTEM = (
    "You invent characters for a social simulation in which AI agents role-play people. A character is a "
    "believable, specific person: full name, age, gender and pronouns, occupation, two or three sentences of "
    "public information, Big Five personality levels, moral and Schwartz values, a decision-making style, "
    "and a secret they would not want others to learn. Answer with one JSON object only."
)


@dataclass(frozen=True)
class Attributes:
    """What one request asks for."""

    age_band: tuple[int, int]
    gender: str
    pronouns: str
    occupation_field: str
    traits: tuple[tuple[str, str], ...]
    secret_theme: str

    @classmethod
    def sample(cls, rng: random.Random) -> Attributes:
        gender, pronouns, _ = rng.choices(GENDERS, weights=[g[2] for g in GENDERS])[0]
        traits = tuple((t, rng.choice(LEVELS)) for t in rng.sample(TRAITS, 2))
        return cls(
            age_band=rng.choice(AGE_BANDS),
            gender=gender,
            pronouns=pronouns,
            occupation_field=rng.choice(OCCUPATION_FIELDS),
            traits=traits,
            secret_theme=rng.choice(SECRET_THEMES),
        )

    def describe(self) -> str:
        low, high = self.age_band
        traits = " and ".join(f"{level} {trait}" for trait, level in self.traits)
        return (
            f"a {self.gender} ({self.pronouns}) aged {low} to {high}, working (or training) in "
            f"{self.occupation_field}, with {traits}, whose secret is about {self.secret_theme}"
        )


def character_schema(attrs: Attributes) -> dict[str, Any]:
    """The reply schema; age band, gender and pronouns are fixed to the sampled attributes."""
    low, high = attrs.age_band

    def text(max_length: int, min_length: int = 1) -> dict[str, Any]:
        return {"type": "string", "minLength": min_length, "maxLength": max_length}

    def values(options: list[str]) -> dict[str, Any]:
        return {"type": "array", "items": {"type": "string", "enum": options}, "minItems": 1, "maxItems": 2}

    level = {"type": "string", "enum": LEVELS}
    properties: dict[str, Any] = {
        "first_name": text(24),
        "last_name": text(24),
        "age": {"type": "integer", "minimum": low, "maximum": high},
        "gender": {"type": "string", "enum": [attrs.gender]},
        "pronouns": {"type": "string", "enum": [attrs.pronouns]},
        "occupation": text(50, 3),
        "public_info": text(300, 20),
        "big_five": {
            "type": "object",
            "properties": dict.fromkeys(TRAITS, level),
            "required": TRAITS,
            "additionalProperties": False,
        },
        "moral_values": values(MORAL_VALUES),
        "schwartz_values": values(SCHWARTZ_VALUES),
        "decision_making_style": {"type": "string", "enum": DECISION_STYLES},
        "secret": text(200, 10),
    }
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def example_json(character: Character) -> str:
    return json.dumps(character.model_dump(exclude={"id"}), ensure_ascii=False)


def character_messages(attrs: Attributes, example: Character) -> list[dict[str, str]]:
    user = (
        f"An example character:\n\n{example_json(example)}\n\n"
        f"Invent a new, different character: {attrs.describe()}. Give them an uncommon, realistic name."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_character(text: str) -> Character:
    """A valid character from a reply, with a provisional id; InvalidGeneration otherwise."""
    data = load_json_object(text)
    base = slug(f"{data.get('first_name', '')} {data.get('last_name', '')}") or "character"
    try:
        fields = {k: v for k, v in data.items() if k in Character.model_fields and k != "id"}
        return Character.model_validate({**fields, "id": f"gen-{base}"})
    except ValidationError as exc:
        raise InvalidGeneration(field_problem(exc)) from None


def character_entry(character: Character) -> dict[str, Any]:
    entry = character.model_dump()
    entry["big_five"] = dict(entry["big_five"])
    return entry


class _CharacterRun:
    def __init__(self, backend: Backend, library: Library, out_dir: Path, settings: RunSettings, threshold: float):
        self.backend = backend
        self.out_dir = out_dir
        self.settings = settings
        self.taken = set(library.characters)
        self.names = {c.name.casefold() for c in library.characters.values()}
        self.index = NearDuplicateIndex(threshold)
        for c in library.characters.values():
            self.index.add(c.id, character_text(c))

    async def job(self, attrs: Attributes, example: Character, request_seed: int) -> Outcome:
        messages = character_messages(attrs, example)
        schema = character_schema(attrs)
        character, error, attempts = await generate_valid(
            self.backend, messages, schema, parse_character, self.settings, request_seed
        )
        if character is None:
            return Outcome("failed", detail=error, attempts=attempts)
        return self.accept(character, attempts)

    def accept(self, character: Character, attempts: int) -> Outcome:
        if character.name.casefold() in self.names:
            return Outcome("duplicate", detail=f"name {character.name!r} is taken", attempts=attempts)
        duplicate = self.index.match(character_text(character))
        if duplicate is not None:
            detail = f"near-copy of {duplicate[0]} (similarity {duplicate[1]:.2f})"
            return Outcome("duplicate", detail=detail, attempts=attempts)
        character = character.model_copy(update={"id": unique_id(character.id, self.taken)})
        self.names.add(character.name.casefold())
        self.index.add(character.id, character_text(character))
        header = f"Generated by sotopia-env characters generate (model {self.backend.model})."
        path = write_yaml(self.out_dir / f"{character.id}.yaml", "characters", [character_entry(character)], header)
        return Outcome("generated", item_id=character.id, attempts=attempts, path=path)


async def generate_characters(
    backend: Backend,
    n: int,
    out_dir: str | Path,
    library: Library,
    *,
    settings: RunSettings | None = None,
    threshold: float = DUPLICATE_THRESHOLD,
    on_start: OnStart | None = None,
    on_outcome: OnOutcome | None = None,
) -> GenerationStats:
    """Ask for ``n`` characters and write the valid, new ones under ``out_dir``; returns the counts."""
    settings = settings or RunSettings()
    run = _CharacterRun(backend, library, Path(out_dir), settings, threshold)
    rng = random.Random(settings.seed)
    examples = sorted(library.characters.values(), key=lambda c: c.id)
    if not examples:
        raise ValueError("the library has no characters to show as an example")
    jobs = [
        partial(run.job, Attributes.sample(rng), rng.choice(examples), rng.randrange(2**31)) for _ in range(max(0, n))
    ]
    stats = GenerationStats(requested=len(jobs))
    if on_start is not None:
        on_start(len(jobs))
    await run_bounded(jobs, settings.concurrency, stats, on_outcome)
    return stats
