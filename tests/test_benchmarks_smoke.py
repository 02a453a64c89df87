"""Each benchmark script runs with ``--quick`` (tiny sizes) and prints its tables, so the scripts don't rot
(``local_batching.py`` in a ``model``-marked test of its own, since it needs the embedded model).

The scripts run as subprocesses, all at once (a few seconds each, mostly imports); the figures themselves are
not checked here: they live in benchmarks/README.md. ``vs_sotopia.py`` gets a venv path that does not exist,
so it never installs sotopia from a test and runs our side only.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS: dict[str, tuple[list[str], list[str]]] = {
    # script: (extra arguments, table titles that must be printed)
    "overhead.py": ([], ["time per step and per episode", "cost of each piece", "memory", "cProfile"]),
    "throughput.py": ([], ["episodes per minute vs concurrency"]),
    "stores.py": (["--stores", "sqlite"], ["write and read rates"]),
    "vs_sotopia.py": (["--venv", "/nonexistent/sotopia-bench-venv"], ["side by side", "prompt tokens"]),
    "startup.py": ([], ["wall time of a fresh process", "python -X importtime"]),
    "scale.py": ([], ["episodes per minute through sotopia-env benchmark"]),
    "memory.py": ([], ["peak memory per stage, MiB"]),  # --quick: the model-free stages, a process each
}
if all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn", "websockets")):  # the server's 'view' extra
    SCRIPTS["server.py"] = ([], ["episodes per minute through the API with viewers attached, vs the CLI"])


@pytest.fixture(scope="module")
def outputs() -> dict[str, subprocess.CompletedProcess[str]]:
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / name), "--quick", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (args, _) in SCRIPTS.items()
    }
    done = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_benchmark_script_runs_and_prints_its_tables(
    script: str, outputs: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    result = outputs[script]
    assert result.returncode == 0, f"{script} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    for title in SCRIPTS[script][1]:
        assert f"### {title}" in result.stdout, f"{script}: no table {title!r} in:\n{result.stdout[-3000:]}"
    assert "load average" in result.stdout  # every run says under what load it was measured
    assert "| ---" in result.stdout


@pytest.mark.model
def test_local_batching_benchmark_runs_on_the_embedded_model(embedded_model_path: str) -> None:
    """The local backend benchmark needs the model, so it runs on its own (about half a minute)."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "local_batching.py"), "--quick"]
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    assert "### tokens per second, batched vs one at a time" in result.stdout and "load average" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith(("| json", "| episodes"))]
    assert len(rows) == 4 and all(int(row.split("|")[5].replace(",", "")) > 0 for row in rows)  # tokens made


def quick_run(script: str) -> str:
    """``benchmarks/<script> --quick``'s output, once it exited cleanly."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / script), "--quick"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.model
def test_grpo_step_benchmark_runs_on_the_embedded_model(embedded_model_path: str) -> None:
    out = quick_run("grpo_step.py")
    assert "### episode-GRPO steps" in out and "load average" in out
    (row,) = [line for line in out.splitlines() if line.startswith("| this code")]
    assert float(row.split("|")[5]) > 0  # the rollouts took time: they ran


@pytest.mark.model
def test_game_rl_benchmark_runs_on_the_embedded_model(embedded_model_path: str) -> None:
    out = quick_run("game_rl.py")
    assert "### Game RL: proposer in negotiation-hackathon-prize" in out and "load average" in out
    rows = [line.split("|") for line in out.splitlines() if line.startswith(("| base", "| bc", "| grpo"))]
    assert [r[1].strip() for r in rows] == ["base", "bc", "grpo"]
    assert all(r[9].strip() == "0" for r in rows)  # "unrated": every game rated
    (bc_note,) = [line for line in out.splitlines() if line.startswith("- bc/seed0: ")]
    assert int(bc_note.split(" turns of ")[1].split(" won proposer seats")[0]) > 0  # the rule players' wins taught it


@pytest.mark.model
def test_gpu_smoke_dry_run_gives_every_stage_a_row_on_the_cpu(embedded_model_path: str, tmp_path: Path) -> None:
    """``gpu_smoke.py --cpu`` (about a minute): SmolLM2-135M's shape, shrunk, random weights; generation, 2 episode
    GRPO steps and 2 TRL environment steps, each in its own process, in one table with where the model was."""
    script = str(ROOT / "benchmarks" / "gpu_smoke.py")
    subprocess.run([sys.executable, script, "--prepare", str(tmp_path / "shape")], check=True, timeout=60)
    assert not list((tmp_path / "shape").glob("*.safetensors"))  # the shape travels without weights
    cmd = [sys.executable, script, "--cpu", "--shape", str(tmp_path / "shape"), "--out", str(tmp_path / "out")]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "### GPU smoke test: shape's architecture, 2 layers, 64 wide (--cpu), RANDOM weights" in result.stdout
    rows = {line.split("|")[1].strip(): line.split("|") for line in result.stdout.splitlines() if line.startswith("| ")}
    for stage in ("generation", "episode_grpo", "trl_env"):
        assert rows[stage][5].strip() == "cpu float32"  # the device and dtype the stage's model was on
        assert float(rows[stage][2]) > 0 and float(rows[stage][3]) > 0  # step time, tokens per second
    calls = int(rows["trl_env"][6].split(" tool calls (constrained)")[0].rsplit(", ", 1)[1])
    assert calls >= 1  # the constrained call went through TRL's tool loop into the environment
