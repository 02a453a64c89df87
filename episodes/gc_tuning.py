"""The garbage collector's settings for a long batch of episodes.

At 256 episodes in flight one event loop allocates a few hundred thousand short-lived objects a second
(observations, prompts, request bodies, replies). With CPython's default thresholds (700, 10, 10) the collector
then ran about 850 times in a 9.5 s batch and took 1.06 s of it, each pause stalling every episode's next call
(``benchmarks/scale.py``: 88% of the latency bound at 256; 92% with these settings, the same as with the
collector off).
"""

from __future__ import annotations

import gc

BATCH_THRESHOLDS = (50_000, 20, 20)  # young collections every 50,000 allocations, not 700


def tune_gc_for_batch() -> None:
    """Before a long batch, in a process that runs batches (the CLI, a Ray worker):

    - collect, then freeze what exists (the imports: litellm, transformers, pydantic models), so that no
      collection walks those millions of long-lived objects again;
    - collect the young generations less often (``BATCH_THRESHOLDS``): most objects die young anyway.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*BATCH_THRESHOLDS)
