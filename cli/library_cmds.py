"""``sotopia-env scenarios ...`` and ``sotopia-env characters ...``."""

from __future__ import annotations

from pathlib import Path

import typer

from sotopia_env.cli.common import console, fail, user_errors
from sotopia_env.cli.generate_cmds import generate_characters_cmd, generate_scenarios_cmd
from sotopia_env.cli.options import ScenariosDir, library
from sotopia_env.errors import did_you_mean

scenarios_app = typer.Typer(help="Browse and validate scenarios.", no_args_is_help=True)
characters_app = typer.Typer(help="Browse characters.", no_args_is_help=True)
scenarios_app.command("generate")(generate_scenarios_cmd)
characters_app.command("generate")(generate_characters_cmd)


@scenarios_app.command("list")
def list_scenarios(
    split: str = typer.Option(None, help="Only this split: train, dev or test."),
    tag: str = typer.Option(None, help="Only scenarios with this tag (e.g. hard)."),
    scenarios_dir: list[Path] = ScenariosDir,
) -> None:
    """List scenarios with their relationship, split and tags."""
    from rich.table import Table

    if split is not None and split not in ("train", "dev", "test"):
        raise fail(f"--split {split!r}: expected train, dev or test")
    lib = library(scenarios_dir)
    tags = {t for s in lib.scenarios.values() for t in s.tags}
    if tag is not None and tag not in tags:
        raise fail(
            f"--tag {tag!r}: no scenario has this tag{did_you_mean(tag, tags, 'the tags: ' + ', '.join(sorted(tags)))}"
        )
    table = Table("id", "relationship", "split", "tags", "scenario")
    shown = 0
    for s in sorted(lib.scenarios.values(), key=lambda s: s.id):
        if (split and s.split != split) or (tag and tag not in s.tags):
            continue
        table.add_row(s.id, s.relationship.name, s.split, ",".join(s.tags), s.scenario[:70] + "…")
        shown += 1
    console.print(table)
    console.print(f"{shown} scenarios")


@scenarios_app.command("show")
def show_scenario(scenario_id: str, scenarios_dir: list[Path] = ScenariosDir) -> None:
    """Show one scenario in full, goals and hints included."""
    lib = library(scenarios_dir)
    with user_errors():
        (s,) = lib.select([scenario_id])
    console.print(f"[bold]{s.id}[/] ({s.codename}) relationship={s.relationship.name} split={s.split} tags={s.tags}")
    console.print(s.scenario, highlight=False)
    for i, goal in enumerate(s.goals):
        console.print(f"[bold]goal {i + 1}:[/] {goal}", highlight=False, markup=True)
    if s.constraints:
        for i, c in enumerate(s.constraints):
            console.print(f"seat {i + 1}: {c.model_dump(exclude_none=True)}")


@scenarios_app.command("validate")
def validate(paths: list[Path] = typer.Argument(..., help="YAML files or directories.")) -> None:
    """Validate library YAML; a broken file gets one line naming file, entry and field."""
    from sotopia_env.library import Library, LibraryError, load_library, yaml_files

    with user_errors(LibraryError, OSError):
        counts = Library()
        for path in paths:
            if not path.exists():
                raise LibraryError(f"{path}: no such file or directory")
            files = yaml_files(path)
            if not files:
                raise LibraryError(f"{path}: no YAML files (*.yaml, *.yml) to validate")
            for f in files:
                counts.add_file(f)
        load_library(paths)  # references resolve against the built-in characters too
        if not (counts.scenarios or counts.characters or counts.relationships):
            raise LibraryError(f"{', '.join(map(str, paths))}: no scenarios, characters or relationships in it")
    console.print(
        f"ok: {len(counts.scenarios)} scenarios, {len(counts.characters)} characters, "
        f"{len(counts.relationships)} relationships"
    )


@characters_app.command("list")
def list_characters(scenarios_dir: list[Path] = ScenariosDir) -> None:
    """List characters: name, age, occupation."""
    from rich.table import Table

    lib = library(scenarios_dir)
    table = Table("id", "name", "age", "occupation", "pronouns")
    for c in sorted(lib.characters.values(), key=lambda c: c.id):
        table.add_row(c.id, c.name, str(c.age), c.occupation, c.pronouns)
    console.print(table)
    console.print(f"{len(lib.characters)} characters")
