"""What a GRPO run returns and keeps in ``OUTPUT_DIR/grpo_result.json``: text GRPO and episode GRPO alike.

How a result reads (what its ``prompts`` are, what its ``None`` rewards and skipped batches mean) is the trainer's
to say, not this module's: a trainer registers its ``ResultWords`` for its tasks (``Trainer.words`` in
``training.trainers``), and a task without any reads as text GRPO's (``ResultWords()``)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sotopia_env.registry import Registry

RESULT_FILE = "grpo_result.json"


@dataclass(frozen=True)
class ResultWords:
    """How a trainer's result names what it counted: text GRPO's by default."""

    items: str = "prompts"  # what ``prompts`` counts
    nones: str = "None rewards"  # what ``none_rewards`` counts
    unscorable: str = "unscorable batches skipped"  # what ``unscorable_batches`` counts


RESULT_WORDS: Registry[ResultWords] = Registry("result wording")  # a task -> its trainer's words, if not the default


@dataclass
class GRPOResult:
    model_dir: str  # a model spec
    task: str
    steps: int
    prompts: int
    rewards: list[float | None]  # mean reward of every logged step (None: every reward was None)
    none_rewards: int  # reward values that were None, over the whole run
    unscorable_batches: int  # generation batches where every reward was None (skipped: no gradient)
    seconds: float
    resumed_from: str | None = None
    qlora: bool = False
    bf16: bool = False
    placement: str = ""  # where the model's weights were and their dtype: "cuda:0 bfloat16", "cpu float32"
    log: list[dict[str, Any]] = field(default_factory=list)  # every step's log line (TRL's, or episode GRPO's)

    @property
    def zero_std_share(self) -> float | None:
        """The mean share of groups whose rewards were all equal (no signal): TRL's ``frac_reward_zero_std``, or
        episode GRPO's ``zero_std_groups``; None when no step logged it."""
        values = [row.get("frac_reward_zero_std", row.get("zero_std_groups")) for row in self.log]
        values = [v for v in values if v is not None]
        return round(sum(values) / len(values), 4) if values else None

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: Path) -> GRPOResult:
        """The result ``save`` wrote (another rank's, under ``accelerate launch``)."""
        return cls(**json.loads(path.read_text()))

    @property
    def words(self) -> ResultWords:
        """How this result reads: its task's trainer's words (``RESULT_WORDS``), else text GRPO's."""
        return RESULT_WORDS.get(self.task) or ResultWords()

    def dataset(self) -> str:
        """What it trained on, in words (episode GRPO's ``prompts`` are group starts)."""
        return f"{self.task}: {self.prompts} {self.words.items}"

    def note(self) -> str:
        """The ``None`` rewards and skipped updates, in words (episode GRPO's: unrated episodes, groups)."""
        words = self.words
        note = f"{words.nones}: {self.none_rewards}, {words.unscorable}: {self.unscorable_batches}"
        share = self.zero_std_share
        return note if share is None else f"{note}, zero-variance share {share:.2f}"
