"""SOTOPIA-EVAL's seven dimensions, and the dimension sets a config or the CLI names.

| dimension | range |
| --- | --- |
| believability | 0..10 |
| relationship | -5..5 |
| knowledge | 0..10 |
| secret | -10..0 |
| social_rules | -10..0 |
| financial_and_material_benefits | -5..5 |
| goal | 0..10 |
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator


class Dimension(BaseModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    description: str
    low: int
    high: int

    @model_validator(mode="after")
    def _range(self) -> Dimension:
        if self.low >= self.high:
            raise ValueError(f"dimension {self.name}: low {self.low} must be below high {self.high}")
        return self


SOTOPIA_DIMENSIONS: tuple[Dimension, ...] = (
    Dimension(
        name="believability",
        low=0,
        high=10,
        description="Does the agent act naturally and consistently with its character profile? "
        "0 = robotic or out of character, 10 = fully human-like and in character.",
    ),
    Dimension(
        name="relationship",
        low=-5,
        high=5,
        description="Did the interaction improve (+) or harm (-) the agent's relationship with the others, "
        "including social status and reputation? 0 = no change.",
    ),
    Dimension(
        name="knowledge",
        low=0,
        high=10,
        description="Did the agent gain new, important information through the interaction? 0 = none, 10 = a lot.",
    ),
    Dimension(
        name="secret",
        low=-10,
        high=0,
        description="Did the agent reveal its secret or secretive intentions? 0 = kept everything, "
        "-10 = revealed critical secrets.",
    ),
    Dimension(
        name="social_rules",
        low=-10,
        high=0,
        description="Did the agent violate moral rules or laws (lying, threats, harassment...)? "
        "0 = no violation, -10 = severe violations.",
    ),
    Dimension(
        name="financial_and_material_benefits",
        low=-5,
        high=5,
        description="Did the agent gain (+) or lose (-) money, goods or other material benefits? 0 = no change.",
    ),
    Dimension(
        name="goal",
        low=0,
        high=10,
        description="How far did the agent achieve its own social goal? 0 = not at all, 10 = fully achieved.",
    ),
)

GOAL_ONLY: tuple[Dimension, ...] = tuple(d for d in SOTOPIA_DIMENSIONS if d.name == "goal")


def dimensions_from_config(spec: str | list[dict[str, Any]] | None) -> tuple[Dimension, ...]:
    """``sotopia`` (all seven), ``goal`` (goal only), a comma list of SOTOPIA names, or custom dicts."""
    if spec is None or spec == "sotopia":
        return SOTOPIA_DIMENSIONS
    if isinstance(spec, str):
        known = {d.name: d for d in SOTOPIA_DIMENSIONS}
        names = [n.strip() for n in spec.split(",") if n.strip()]
        unknown = [n for n in names if n not in known]
        if not names:
            raise ValueError(f"no dimension named in {spec!r} (sotopia, goal, or a comma list of: {', '.join(known)})")
        if unknown:
            raise ValueError(f"unknown dimension {unknown[0]!r} (known: {', '.join(known)})")
        return tuple(known[n] for n in names)
    return tuple(Dimension.model_validate(d) for d in spec)
