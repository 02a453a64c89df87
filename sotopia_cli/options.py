"""Options shared by several commands."""

from __future__ import annotations

from pathlib import Path

import typer

ScenariosDir = typer.Option(None, "--scenarios-dir", help="Extra scenario/character YAML files or directories.")
Store = typer.Option(
    None,
    "--store",
    help="Episode store URL: sqlite:///path.db or redis://host:port/0. "
    "Default: SQLite in the user data dir ($SOTOPIA_ENV_STORE overrides).",
)
StoreRetry = typer.Option(
    60.0,  # episodes.store_writer.DEFAULT_RETRY_SECONDS
    "--store-retry-seconds",
    min=0,
    help="Retry a failed store write this long (Redis down, SQLite locked) before saving the episodes to a spill "
    "file that 'episodes import' restores.",
)
ApiBase = typer.Option(None, "--api-base", help="Base URL of an OpenAI-compatible server (vLLM, llama.cpp, Ollama).")
Evaluator = typer.Option(
    "smollm2-135m",
    "--evaluator",
    help="The judge: a model spec, 'rule-based' (offline), 'verifiable' (exact goal on verifiable scenarios), "
    "or 'none' to skip rating.",
)


def _agents_path(folders: list[Path] | None) -> list[Path] | None:
    from agents.loading import AgentSpecError, add_agents_path
    from sotopia_cli.common import user_errors

    with user_errors(AgentSpecError):
        add_agents_path(folders or [])
    return folders


AgentsPath = typer.Option(
    None,
    "--agents-path",
    callback=_agents_path,
    help="A folder to import module:Class agents from (repeatable); the current folder is always searched first.",
)
Dimensions = typer.Option(
    "sotopia", "--dimensions", help="'sotopia' (all seven), 'goal', or a comma list of SOTOPIA dimension names."
)


def library(extra: list[Path] | None):
    from sotopia_cli.common import user_errors
    from sotopia_env.library import LibraryError, load_library

    with user_errors(LibraryError, OSError):
        return load_library(extra or [])
