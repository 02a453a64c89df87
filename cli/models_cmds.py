"""``sotopia-env models ...``: the embedded models and their cache."""

from __future__ import annotations

import typer

from sotopia_env.cli.common import console, user_errors

models_app = typer.Typer(help="Embedded models: list them, fetch their weights into the cache.", no_args_is_help=True)


@models_app.command("pull")
def pull(name: str = typer.Argument(..., help="An embedded model's alias, e.g. smollm2-135m.")) -> None:
    """Fetch a model's weights into the cache (once; later runs use the cache)."""
    from sotopia_env.embedded_models import ModelUnavailable, pull_model

    with user_errors(ModelUnavailable, ValueError, OSError):
        path = pull_model(name)
    console.print(f"{name}: {path}", highlight=False)


@models_app.command("list")
def list_cmd() -> None:
    """List the embedded models, whether each is cached, and its size on disk."""
    from rich.table import Table

    from sotopia_env.embedded_models import cache_dir, list_models

    table = Table("alias", "cached", "size")
    table.add_column("hub id", overflow="fold")
    table.add_column("path", overflow="fold")
    for row in list_models():
        size = f"{row.size_bytes / 1e6:.0f} MB" if row.size_bytes is not None else "-"
        cached = "[green]yes[/]" if row.cached else "no"
        table.add_row(row.alias, cached, size, row.hub_id, row.path if row.cached else "-")
    console.print(table)
    console.print(f"cache: {cache_dir()}", highlight=False)
