"""Helpers shared by the benchmark scripts (not a benchmark itself).

Puts the repository root and ``tests/`` on ``sys.path`` (the scripts run as ``python benchmarks/X.py``
and reuse ``tests/loopback_openai.py`` and ``tests/episode_fixtures.py``), prints tables, and starts
the loopback OpenAI server in a child process (``_loopback_server.py``) so that its threads do not
share the benchmarked process's GIL, as a real inference server would not.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
for _path in (ROOT, ROOT / "tests", HERE):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at litellm import


def machine_line() -> str:
    """One line saying where and under what load the figures were taken."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {load} (1/5/15 min)"
    )


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], note: str = "") -> None:
    """A plain Markdown table (pasteable into benchmarks/README.md as is)."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(str(c)), *(len(r[i]) for r in cells)) if cells else len(str(c)) for i, c in enumerate(columns)]
    print(f"\n### {title}\n")
    print("| " + " | ".join(str(c).ljust(w) for c, w in zip(columns, widths, strict=True)) + " |")
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for row in cells:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    if note:
        print(f"\n{note}")
    sys.stdout.flush()


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def cpu_seconds() -> float:
    """User + system CPU time of this process so far (all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def two_seat_setups(n: int) -> list[Any]:
    """``n`` setups cycling over one two-seat setup per built-in scenario (distinct scenarios first)."""
    from episode_fixtures import setups

    pool = setups()
    return [pool[i % len(pool)] for i in range(n)]


def distinct_setups(n: int) -> list[Any]:
    """``n`` setups with distinct (scenario, characters) combinations: every two-seat scenario's first
    eligible casting, then every scenario's second, and so on."""
    from sotopia_env.library import load_library
    from sotopia_env.sampler import eligible_setups

    library = load_library()
    options = [eligible_setups(s, library) for _, s in sorted(library.scenarios.items()) if s.num_agents == 2]
    out: list[Any] = []
    depth = 0
    while len(out) < n:
        layer = [opts[depth] for opts in options if depth < len(opts)]
        if not layer:
            raise ValueError(f"the library has only {len(out)} distinct two-seat setups")
        out.extend(layer[: n - len(out)])
        depth += 1
    return out


class LoopbackProcess:
    """``_loopback_server.py`` in a child process; ``base_url`` once started. A context manager.

    ``stats()`` returns counters, ``dump(path)`` writes every request received since the last
    ``reset()`` as JSON lines (``messages`` and whether a schema was asked for).
    """

    def __init__(self, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        self._proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> LoopbackProcess:
        self._proc = subprocess.Popen(
            [sys.executable, str(HERE / "_loopback_server.py"), "--latency", str(self.latency_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.startswith("http://"):
            raise RuntimeError(f"the loopback server did not start: {line!r}")
        self.base_url = line
        return self

    def _ask(self, command: str) -> str:
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        return self._proc.stdout.readline().strip()

    def reset(self) -> None:
        self._ask("reset")

    def stats(self) -> dict[str, Any]:
        return json.loads(self._ask("stats"))

    def dump(self, path: Path) -> int:
        return int(self._ask(f"dump {path}"))

    def kill(self) -> None:
        """SIGKILL the server (a crash: its open connections drop, new ones are refused)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def __exit__(self, *exc: object) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()


def wait_for_quiet(max_load: float, max_wait_s: float) -> None:
    """Sleep until the 1-minute load average is below ``max_load`` (or give up after ``max_wait_s``)."""
    deadline = time.monotonic() + max_wait_s
    while os.getloadavg()[0] > max_load and time.monotonic() < deadline:
        time.sleep(10)
