"""A step's peak resident memory, on Linux: the kernel's high-water mark (``VmHWM``), reset at the step's start.

Writing ``5`` to ``/proc/self/clear_refs`` resets the high-water mark to the current RSS (Linux 4.0+). Where that
is not possible, the peak is the process's since it started (``ru_maxrss``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
import sys
from pathlib import Path


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
    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(name).malloc_trim(0))
    except (OSError, AttributeError):
        return False
