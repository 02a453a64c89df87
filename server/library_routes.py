"""``/api/scenarios``, ``/api/characters`` and ``/api/models``: the library to read, and to add to.

A posted scenario or character is validated exactly as the YAML library is: it is written as a one-entry YAML
file into the server's library folder and read back through ``library.parse_file``, so the rules and the
one-line messages (``field 'goals': ...``) are the same; a duplicate id is refused as a second file would be.
Only a file that passed is kept, and the entry joins the library the server runs from.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from fastapi import APIRouter, Body, HTTPException, Query, Request

from sotopia_env.library import Library, LibraryError, parse_file

router = APIRouter(prefix="/api", tags=["library"])
SECTIONS = {"scenarios": "scenarios", "characters": "characters"}


def library_of(request: Request) -> Library:
    return request.app.state.simulations.library


@router.get("/models", summary="Model specs: the embedded models, and the server's default model server")
def models(request: Request) -> dict[str, Any]:
    from sotopia_env.embedded_models import list_models

    embedded = [{"alias": m.alias, "hub_id": m.hub_id, "cached": m.cached} for m in list_models()]
    return {
        "embedded": embedded,
        "rule_agents": ["rule-partner", "rule-player"],
        "human": "human",
        "api_base": request.app.state.simulations.servers.default,
        "hint": "any litellm model spec (e.g. gpt-4o-mini) works where the server has the key in its environment",
    }


@router.get("/scenarios", summary="Scenarios, filtered by tag and split")
def scenarios(
    request: Request,
    tag: str | None = Query(None, description="Only scenarios with this tag."),
    split: str | None = Query(None, description="Only this split: train, dev or test."),
) -> list[dict[str, Any]]:
    chosen = [
        s
        for s in library_of(request).scenarios.values()
        if (tag is None or tag in s.tags) and (split is None or s.split == split)
    ]
    return [
        {"id": s.id, "codename": s.codename, "seats": s.num_agents, "tags": s.tags, "split": s.split}
        for s in sorted(chosen, key=lambda s: s.id)
    ]


@router.get("/scenarios/{scenario_id}", summary="One scenario, whole")
def scenario(request: Request, scenario_id: str) -> dict[str, Any]:
    found = library_of(request).scenarios.get(scenario_id)
    if found is None:
        raise HTTPException(404, f"no scenario {scenario_id!r}")
    return found.model_dump(mode="json")


@router.get("/characters", summary="Characters")
def characters(request: Request) -> list[dict[str, Any]]:
    return [c.model_dump(mode="json") for c in sorted(library_of(request).characters.values(), key=lambda c: c.id)]


@router.post("/scenarios", status_code=201, summary="Add a scenario (validated as the YAML library is)")
def add_scenario(request: Request, entry: dict[str, Any] = Body(...)) -> dict[str, Any]:
    return _add(request, "scenarios", entry)


@router.post("/characters", status_code=201, summary="Add a character (validated as the YAML library is)")
def add_character(request: Request, entry: dict[str, Any] = Body(...)) -> dict[str, Any]:
    return _add(request, "characters", entry)


def _add(request: Request, section: str, entry: dict[str, Any]) -> dict[str, Any]:
    folder: Path = request.app.state.library_dir
    library = library_of(request)
    entry_id = entry.get("id")
    if not isinstance(entry_id, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", entry_id):
        raise HTTPException(422, "field 'id': a name of letters, digits, '.', '_' or '-' is required")
    table: dict[str, Any] = getattr(library, SECTIONS[section])
    if entry_id in table:
        raise HTTPException(422, f"field 'id': duplicate id {entry_id!r}")
    target = folder / section / f"{entry_id}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{entry_id}.", suffix=".yaml", dir=target.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        yaml.safe_dump({section: [entry]}, f, sort_keys=False, allow_unicode=True)
    try:
        parsed = parse_file(Path(temp))[section][0]
    except LibraryError as exc:
        Path(temp).unlink(missing_ok=True)
        message = str(exc)  # "<file>: scenarios entry 0 (id 'x'), field 'goals': ...": the file is a temporary one
        raise HTTPException(422, message[message.find("field '") :] if "field '" in message else message) from None
    os.replace(temp, target)
    table[entry_id] = parsed
    return {"id": entry_id, "file": str(target)}
