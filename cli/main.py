"""The ``sotopia-env`` entry point: registers every command group."""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from sotopia_env.cli.benchmark_cmd import benchmark
from sotopia_env.cli.common import fail
from sotopia_env.cli.episodes_cmds import episodes_app, report
from sotopia_env.cli.eval_cmds import eval_app
from sotopia_env.cli.leaderboard_cmd import leaderboard
from sotopia_env.cli.library_cmds import characters_app, scenarios_app
from sotopia_env.cli.models_cmds import models_app
from sotopia_env.cli.openenv_cmd import openenv
from sotopia_env.cli.run_cmd import run
from sotopia_env.cli.serve_cmd import serve
from sotopia_env.cli.train_cmds import train_app
from sotopia_env.cli.view_cmd import view
from sotopia_env.errors import UserError


class _OneLineErrors(TyperGroup):
    """Every ``UserError`` raised by any command becomes one line on stderr and exit code 1."""

    def invoke(self, ctx):  # type: ignore[no-untyped-def]
        try:
            return super().invoke(ctx)
        except UserError as exc:
            raise fail(str(exc)) from None


app = typer.Typer(
    cls=_OneLineErrors,
    name="sotopia-env",
    help="Social simulation for LLM agents: run episodes, rate them, train on them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(scenarios_app, name="scenarios")
app.add_typer(characters_app, name="characters")
app.add_typer(models_app, name="models")
app.command("run")(run)
app.command("benchmark")(benchmark)
app.command("report")(report)
app.command("leaderboard")(leaderboard)
app.add_typer(episodes_app, name="episodes")
app.add_typer(train_app, name="train")
app.command("view")(view)
app.command("serve")(serve)
app.command("openenv")(openenv)
app.add_typer(eval_app, name="eval")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"sotopia-env {version('sotopia-env')}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Social simulation for LLM agents."""
