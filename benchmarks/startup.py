"""Start-up cost: wall time of CLI commands and imports, and what the CLI imports before it can print --help.

    python benchmarks/startup.py            # best of 5 runs each
    python benchmarks/startup.py --quick    # best of 1 (the smoke test)

Each command runs in a fresh interpreter (``subprocess``), so the figures include interpreter start-up
(the ``python -c pass`` row). When the sotopia benchmark venv exists (see ``vs_sotopia.py``), ``sotopia --help``
is timed too. The second table is ``python -X importtime`` for ``sotopia-env --help``: the modules with the
largest cumulative import time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

import _common
from _common import machine_line, print_table
from vs_sotopia import DEFAULT_VENV

_ = _common
LITELLM = "from sotopia_env.backends import litellm_backend as b; b.import_litellm()"
CLI = [sys.executable, "-c", "import sys; from sotopia_env.cli.main import app; sys.argv[0] = 'sotopia-env'; app()"]


def best_of(command: list[str], runs: int) -> float:
    best = float("inf")
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
        best = min(best, time.perf_counter() - start)
    return best


def importtime_top(command: list[str], top: int) -> list[tuple[str, float, float]]:
    done = subprocess.run([command[0], "-X", "importtime", *command[1:]], capture_output=True, text=True, check=False)
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, self_us, cumulative_us, name = (part.strip() for part in line.replace("import time:", "|").split("|"))
        if name.startswith(" ") or name.lstrip() == name:
            rows.append((name.strip(), int(self_us) / 1e3, int(cumulative_us) / 1e3, len(name) - len(name.lstrip())))
    roots = [r for r in rows if r[3] <= 2]  # top-level and first-level imports
    roots.sort(key=lambda r: -r[2])
    return [(name, self_ms, cumulative_ms) for name, self_ms, cumulative_ms, _ in roots[:top]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--quick", action="store_true", help="one run each, for the smoke test")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.top = 1, 5
    print(f"# Start-up (best of {args.runs} runs)\n\n{machine_line()}")
    py = sys.executable
    commands: list[tuple[str, list[str]]] = [
        ("python -c pass", [py, "-c", "pass"]),
        ("sotopia-env --help", [*CLI, "--help"]),
        ("sotopia-env run --help", [*CLI, "run", "--help"]),
        ("sotopia-env scenarios list", [*CLI, "scenarios", "list"]),
        ("import sotopia_env.env (the env)", [py, "-c", "import sotopia_env.env"]),
        ("import episodes.runner (env + agents + runner)", [py, "-c", "import episodes.runner"]),
    ]
    if not args.quick:
        commands.append(("import litellm (as LiteLLMBackend does)", [py, "-c", LITELLM]))
    sotopia_bin = DEFAULT_VENV / "bin" / "sotopia"
    if sotopia_bin.exists() and not args.quick:
        venv_py = str(DEFAULT_VENV / "bin" / "python")
        commands += [
            ("sotopia 0.1.5: sotopia --help", [str(sotopia_bin), "--help"]),
            ("sotopia 0.1.5: import sotopia.server", [venv_py, "-c", "import sotopia.server"]),
        ]
    rows = [(label, best_of(command, args.runs) * 1e3) for label, command in commands]
    if shutil.which("sotopia-env"):
        rows.insert(2, ("sotopia-env --help (console script)", best_of(["sotopia-env", "--help"], args.runs) * 1e3))
    print_table("wall time of a fresh process", ["command", "ms"], rows)
    print_table(
        "python -X importtime, sotopia-env --help: largest imports",
        ["module", "self ms", "cumulative ms"],
        importtime_top([*CLI, "--help"], args.top),
    )


if __name__ == "__main__":
    main()
