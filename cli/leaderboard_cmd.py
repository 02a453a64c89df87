"""``sotopia-env leaderboard``: agents ranked per protocol card (``episodes.leaderboard``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from sotopia_env.cli.common import check_output_file, console, fail, user_errors
from sotopia_env.cli.options import Store

if TYPE_CHECKING:
    from sotopia_env.episodes.leaderboard import Board


def leaderboard(
    tag: list[str] = typer.Option(None, "--tag", help="Only episodes of this tag (repeatable). Default: every tag."),
    store: str = Store,
    json_out: Path = typer.Option(None, "--json", help="Also write the boards as JSON here."),
) -> None:
    """Rank agents only against results with the same protocol card (scenario set and its hash, judge and its
    prompt hash, dimensions, seeds, turns, action order, version): one board per card. SOTOPIA-EVAL: mean goal and
    overall per model with 95% t-intervals and n. Won/lost outcomes (verifiable scenarios, games): an OpenSkill
    rating per model (mu, sigma, ordinal mu - 3 sigma)."""
    from sotopia_env.cli.episodes_cmds import open_store_or_fail
    from sotopia_env.episodes.leaderboard import leaderboard as build
    from sotopia_env.episodes.store import StoreError

    check_output_file(json_out, "--json")
    st = open_store_or_fail(store)
    with user_errors(StoreError):
        boards = build(st, tag)
    if not boards:
        raise fail(f"no episodes{f' with tag {tag[0]!r}' if len(tag or []) == 1 else ''} in {st.url}")
    for board in boards:
        print_board(board)
    if json_out:
        json_out.write_text(json.dumps({"boards": [b.to_dict() for b in boards]}, indent=2))
        console.print(f"wrote {json_out}")


def print_board(board: Board) -> None:
    """A board: its card, then its SOTOPIA-EVAL table and its OpenSkill table (where it has them)."""
    from rich.table import Table

    from sotopia_env.cli.render import print_card
    from sotopia_env.episodes.report import format_cell

    console.print()
    print_card(
        board.card, console, title=f"board {board.card.id}: {board.episodes} episodes, tags {', '.join(board.tags)}"
    )
    if board.rows:
        table = Table("#", "model", "goal (95% CI)", "overall (95% CI)", "n", "unrated", "failed", title="SOTOPIA-EVAL")
        for i, r in enumerate(board.rows, 1):
            table.add_row(
                str(i),
                r.model,
                format_cell(r.goal, False),
                format_cell(r.overall, False),
                str(r.rated),
                str(r.unrated),
                str(r.failed),
            )
        console.print(table)
    if board.skills:
        table = Table("#", "model", "ordinal", "mu", "sigma", "matches", "won", title="OpenSkill (Plackett-Luce)")
        for i, s in enumerate(board.skills, 1):
            table.add_row(
                str(i), s.model, f"{s.ordinal:.2f}", f"{s.mu:.2f}", f"{s.sigma:.2f}", str(s.matches), str(s.wins)
            )
        console.print(table)
