"""A toy trainer, the one module ``test_trainer_registry.py`` adds: a config on the shared base and a train function.

It trains nothing: the policy it returns is the one it started from, and it records what it was handed (in
``OUTPUT_DIR/toy_result.json``), so that the test sees what the config parsing, the pipeline and the CLI passed on.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from sotopia_env.training.base_config import BaseTrainConfig


@dataclass
class ToyConfig(BaseTrainConfig):
    task: Literal["toy"] = "toy"
    output_dir: str = "outputs/toy"
    rounds: int = 2  # its own field
    api_base: str | None = None  # the pipeline's, unless set
    scenarios_dir: list[str] = field(default_factory=list)  # the pipeline's folders come first

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rounds < 1:
            raise ValueError(f"rounds must be at least 1, not {self.rounds}")


@dataclass
class ToyResult:
    model_dir: str
    steps: int
    rewards: list[float]
    handed: dict  # the config it was run with

    def dataset(self) -> str:
        return f"toy: {self.steps} rounds"

    def note(self) -> str:
        return "toy: nothing trained"


def train_toy(config: ToyConfig) -> ToyResult:
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = ToyResult(config.base_model, config.rounds, [float(k) for k in range(config.rounds)], asdict(config))
    (out / "toy_result.json").write_text(json.dumps(asdict(result)))
    return result
