"""A step's peak resident memory, on Linux: the kernel's high-water mark (``VmHWM``), reset at the step's start.

Writing ``5`` to ``/proc/self/clear_refs`` resets the high-water mark to the current RSS (Linux 4.0+). Where that
is not possible, the peak is the process's since it started (``ru_maxrss``).

And the C heap, which decides how much of what torch frees on a CPU leaves the RSS. glibc serves a block from
``mmap`` (handed back to the system when freed) only above a threshold that it raises, up to 32 MiB, each time
such a block is freed; below it, blocks come from heaps that keep their freed pages. A training step's
activations are blocks of a few MiB, freed in a different order than they were made, so after the first steps
most of them lived in heaps: a BC step on SmolLM2-135M held 2.8 GB of RSS for 0.75 GB of live tensors
(benchmarks/README, "Training memory"). ``keep_heap_small`` fixes glibc's thresholds at their documented
defaults (128 KiB), which stops the raising.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
import sys
from pathlib import Path

M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc's malloc.h)
M_MMAP_THRESHOLD = -3
HEAP_THRESHOLD = 128 * 1024  # glibc's default for both, before it raises the mmap threshold


def reset_peak_rss() -> bool:
    """Start a new peak from the current RSS; False where the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """The peak RSS since the last reset (or since the process started), in MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def trim_heap() -> bool:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``): tensors freed between steps
    otherwise stay in the process's RSS. False where there is no glibc."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


def keep_heap_small() -> bool:
    """Blocks above 128 KiB are mapped and handed back when freed, from now on (glibc's ``mallopt``, see the
    module docstring), and the free pages the heaps hold now go back too. False where there is no glibc."""
    libc = _glibc()
    if libc is None:
        return False
    fixed = libc.mallopt(M_MMAP_THRESHOLD, HEAP_THRESHOLD) == 1 and libc.mallopt(M_TRIM_THRESHOLD, HEAP_THRESHOLD) == 1
    libc.malloc_trim(0)
    return fixed


def _glibc():
    """The C library when it is glibc (it has ``mallopt`` and ``malloc_trim``), else None."""
    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt, libc.malloc_trim  # noqa: B018 (musl has neither)
    except (OSError, AttributeError):
        return None
    return libc
