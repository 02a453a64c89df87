"""What a GRPO run returns and keeps in ``OUTPUT_DIR/grpo_result.json``: text GRPO and episode GRPO alike."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULT_FILE = "grpo_result.json"


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

    def dataset(self) -> str:
        """What it trained on, in words (task ``episodes``: its ``prompts`` are group starts)."""
        return f"{self.task}: {self.prompts} {'starts' if self.task == 'episodes' else 'prompts'}"

    def note(self) -> str:
        """The ``None`` rewards and skipped updates, in words (task ``episodes``: unrated episodes, groups)."""
        if self.task == "episodes":
            note = f"unrated episodes: {self.none_rewards}, groups without signal: {self.unscorable_batches}"
        else:
            note = f"None rewards: {self.none_rewards}, unscorable batches skipped: {self.unscorable_batches}"
        share = self.zero_std_share
        return note if share is None else f"{note}, zero-variance share {share:.2f}"
