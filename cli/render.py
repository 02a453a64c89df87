"""Rich renderings shared by commands."""

from __future__ import annotations

from rich.table import Table


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
