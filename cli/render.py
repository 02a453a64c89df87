"""Rich renderings shared by commands."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from sotopia_env.episodes.judge_agreement import AgreementFigure
    from sotopia_env.episodes.log import EpisodeLog
    from sotopia_env.episodes.protocol import ProtocolCard


def ratings_table(log) -> Table:
    """Scores per agent and dimension of one rated episode."""
    ratings = log.rating.ratings
    names = list(ratings)  # the rated seats; an unrated one is named below the table
    dims = list(next(iter(ratings.values())).scores)
    table = Table("dimension", *names, title=f"ratings by {log.rating.evaluator}")
    for dim in dims:
        table.add_row(dim, *(str(ratings[n].scores[dim].score) for n in names))
    table.add_row("[bold]overall[/]", *(f"{ratings[n].overall:.2f}" for n in names))
    if any(ratings[n].success is not None for n in names):  # judges that check an outcome (verifiable)
        table.add_row("success", *("-" if ratings[n].success is None else str(ratings[n].success) for n in names))
    return table


def print_card(card: ProtocolCard, console: Console, title: str = "protocol card") -> None:
    """A protocol card as a compact block of ``label  text`` lines (``ProtocolCard.summary``)."""
    console.print(title, style="bold", markup=False, highlight=False)
    for label, text in card.summary():
        console.print(f"  {label:<10} {text}", highlight=False, markup=False)


def show_cards(
    logs: Iterable[EpisodeLog], console: Console, tag: str | None, figures: Iterable[AgreementFigure] = ()
) -> dict[str, Any]:
    """Print the protocol card(s) of ``logs`` (a tag's episodes), and return them for ``--json``: ``{"cards": [...]}``.
    A tag whose episodes were played or judged in more than one way has several, and says so. Each card carries
    the ``figures`` measured for its judge (``episodes evaluate --judge``)."""
    from sotopia_env.episodes.protocol import cards_of

    figures = list(figures)
    cards = [card.with_agreement(figures) for card in cards_of(logs)]
    for card in cards:
        print_card(card, console)
    if len(cards) > 1:
        console.print(
            f"tag {tag!r} mixes {len(cards)} protocol cards: its means pool them; "
            f"'sotopia-env leaderboard --tag {tag}' keeps them apart",
            style="yellow",
            markup=False,
            highlight=False,
        )
    return {"cards": [card.model_dump(mode="json") for card in cards]}
