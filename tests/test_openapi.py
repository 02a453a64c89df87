"""``/api/openapi.json`` tells the truth: schemathesis (``st run --checks all``, no configuration: its own checks and
expected statuses, every phase, a small example budget) against a real ``sotopia-env serve`` on loopback, with its
token, finds no failure and no 5xx (issue #43). A schema-valid request may be refused only with the statuses
schemathesis expects of one (401, 403, 404, 409, 429): never a 422, so the schema carries every rule it can.

No model runs: the embedded model's cache is a stand-in that fails to load at once (each simulation or benchmark
the fuzzer starts fails fast, as a model that cannot load does), and the hub and the package index are off."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server needs the 'view' extra (fastapi)")
pytest.importorskip("schemathesis", reason="the OpenAPI check needs schemathesis (the 'dev' extra)")

from conftest import free_port  # noqa: E402
from server_harness import serving  # noqa: E402

TOKEN = "openapi-check"
RUNNING = ("queued", "running")


def no_model_env(tmp_path: Path) -> dict[str, str]:
    """A model cache whose embedded model is there but cannot load; no hub, no package index."""
    model = tmp_path / "cache" / "models" / "smollm2-135m"
    model.mkdir(parents=True)
    (model / "config.json").write_text("not json")  # transformers refuses it at once
    (model / "model.safetensors").write_text("not weights")
    (tmp_path / "no-wheels").mkdir()
    return {
        "SOTOPIA_ENV_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path / "no-wheels"),
    }


def test_schemathesis_finds_no_failure_in_the_served_document(tmp_path: Path) -> None:
    st = (
        str(Path(sys.executable).parent / "st") if (Path(sys.executable).parent / "st").exists() else shutil.which("st")
    )
    assert st, "schemathesis's 'st' command is not installed"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    options = ("--library-dir", str(tmp_path / "lib"), "--concurrency", "1", "--max-per-client", "10000")
    with serving(
        port, f"sqlite:///{tmp_path / 'e.db'}", *options, log_path=tmp_path / "serve.log", token=TOKEN,
        env=no_model_env(tmp_path),
    ):  # fmt: skip
        for kind in ("simulations", "benchmarks"):  # the first of each imports what it runs; the fuzzer's are fast
            warm = httpx.post(f"{base}/api/{kind}", json={}, headers=auth, timeout=60).json()["id"]
            deadline = time.monotonic() + 180
            while httpx.get(f"{base}/api/{kind}/{warm}", headers=auth, timeout=60).json()["status"] in RUNNING:
                assert time.monotonic() < deadline, f"the warm-up {kind} did not end"
                time.sleep(0.2)
        run = subprocess.run(
            [st, "run", f"{base}/api/openapi.json",
             "--header", f"Authorization: Bearer {TOKEN}", "--checks", "all", "--max-examples", "8",
             "--seed", "43", "--workers", "1", "--request-timeout", "30", "--no-color"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
        )  # fmt: skip
    failures = run.stdout.partition("= FAILURES =")[2].partition("= WARNINGS =")[0] or run.stdout[-4000:]
    assert run.returncode == 0, failures[:8000] + run.stderr[-2000:]
    assert "generated" in run.stdout and "Tested: 0" not in run.stdout, run.stdout[-2000:]  # it did run
