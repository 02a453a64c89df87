"""Several training processes (``accelerate launch``): the main process plays and writes, the other ranks wait.

Under ``accelerate launch --num_processes N`` every rank runs the same pipeline. Playing episodes, writing the
episode store and writing files (datasets, ``state.json``, reports, the trained model spec) is the main
process's job; the other ranks wait at a barrier and then read what it wrote. Training itself is shared: TRL's
trainers run DDP, DeepSpeed or FSDP as the accelerate config says.

The state is made on the first call (``StageContext.open``), before any trainer's: with ``BARRIER_TIMEOUT``,
and on the CPU when ``ACCELERATE_USE_CPU`` is set. Without a launcher (one process), every helper here is a no-op
and accelerate is not even imported.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

# How long the other ranks wait at a barrier while the main process plays a stage's episodes (torch.distributed's
# default, 10-30 minutes, is shorter than an expert's or a judge's batch can be).
BARRIER_TIMEOUT = timedelta(hours=24)


def _state() -> Any:
    """accelerate's ``PartialState`` when several processes were launched; None in a single process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    # The first call fixes the state: cpu as the trainers will ask for it (TrainingArguments reads
    # ACCELERATE_USE_CPU), and a barrier timeout long enough for the main process to play a stage's episodes.
    return PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"), timeout=BARRIER_TIMEOUT)


def is_main_process() -> bool:
    state = _state()
    return state is None or bool(state.is_main_process)


def process_index() -> int:
    state = _state()
    return 0 if state is None else int(state.process_index)


def wait_for_everyone() -> None:
    """A barrier across ranks (nothing in one process)."""
    state = _state()
    if state is not None:
        state.wait_for_everyone()


@contextmanager
def main_process_first() -> Iterator[bool]:
    """The main process runs the block first, the other ranks once it has finished; yields whether this rank is
    the main process (accelerate's ``main_process_first``)."""
    state = _state()
    if state is None:
        yield True
        return
    with state.main_process_first():
        yield bool(state.is_main_process)
