"""benchmarks/README.md's index ("Index: which script answers what") lists every script in ``benchmarks/`` once.

Every ``benchmarks/*.py`` and ``benchmarks/*.sh`` (not ``benchmarks/runs/``) has exactly one row; a ``current`` row
names a file that exists, a ``retired`` row one that does not, and the README says how to recover a retired script
(``git show COMMIT:benchmarks/NAME``). A new script without a row fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
HEADING = "## Index: which script answers what"
STATUSES = ("current", "retired")


def index_rows(readme: str) -> list[tuple[str, str]]:
    """``(script, status)`` for every row of the index's tables, in order."""
    assert readme.count(HEADING) == 1, f"benchmarks/README.md needs one '{HEADING}' heading"
    section = readme.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[-1]))
    return rows


def index_problems(readme: str, folder: Path) -> list[str]:
    """What is wrong between the index and the scripts in ``folder`` (empty when they agree)."""
    rows = index_rows(readme)
    problems = [f"{name}: status {status!r}, not one of {STATUSES}" for name, status in rows if status not in STATUSES]
    names = [name for name, _ in rows]
    problems += [f"{name}: listed {names.count(name)} times" for name in sorted(set(names)) if names.count(name) > 1]
    on_disk = {p.name for p in folder.iterdir() if p.is_file() and p.suffix in (".py", ".sh")}
    problems += [f"{name}: in benchmarks/ but not in the index" for name in sorted(on_disk - set(names))]
    for name, status in rows:
        if status == "current" and name not in on_disk:
            problems.append(f"{name}: listed as current, but benchmarks/{name} does not exist")
        if status == "retired" and name in on_disk:
            problems.append(f"{name}: listed as retired, but benchmarks/{name} still exists")
        if status == "retired" and not re.search(rf"`git show [0-9a-f]{{7,40}}:benchmarks/{re.escape(name)}`", readme):
            problems.append(f"{name}: retired, but no `git show COMMIT:benchmarks/{name}` line says how to recover it")
    return problems


def test_every_benchmark_script_is_in_the_index_once() -> None:
    readme = (BENCHMARKS / "README.md").read_text()
    assert index_problems(readme, BENCHMARKS) == []
    groups = readme.split(HEADING, 1)[1].split("\n## ", 1)[0]
    for group in ("### Performance", "### Learning", "### Quality", "### Scale", "### Support modules"):
        assert group in groups, f"the index has no '{group}' group"


def test_the_index_check_fails_on_a_script_without_a_row(tmp_path: Path) -> None:
    readme = (BENCHMARKS / "README.md").read_text()
    for name, status in index_rows(readme):
        if status == "current":
            (tmp_path / name).write_text("")
    assert index_problems(readme, tmp_path) == []
    (tmp_path / "new_question.py").write_text("")
    assert index_problems(readme, tmp_path) == ["new_question.py: in benchmarks/ but not in the index"]
    (tmp_path / "new_question.py").unlink()
    (retired, _), *_ = [row for row in index_rows(readme) if row[1] == "retired"]
    (tmp_path / retired).write_text("")
    assert index_problems(readme, tmp_path) == [f"{retired}: listed as retired, but benchmarks/{retired} still exists"]
