"""``/api/scenarios``, ``/api/characters`` and ``/api/models``: the library to read, and to add to.

A posted scenario or character is validated exactly as the YAML library is: it is written as a one-entry YAML
file into the server's library folder and read back through ``library.parse_file``, so the rules and the
one-line messages (``field 'goals': ...``, a 422) are the same; a duplicate id is a 409. Only a file that passed
is kept, and the entry joins the library the server runs from. The OpenAPI document declares each body as the
library's own model (``schema_rules``), and a body is held to it as JSON: no string for a number, no ``true`` for
a relationship (YAML would take them). A scenario's per-seat ``constraints``, per-pair ``relationships``, ``game``
and ``verifiable`` facts obey rules no schema can say, so they come as YAML files (``--library-dir``,
``--scenarios-dir``), not over HTTP.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from fastapi import APIRouter, Body, HTTPException, Query, Request
from pydantic import ValidationError

from sotopia_env import profiles
from sotopia_env.library import Library, LibraryError, parse_file
from sotopia_env.server.openapi import NOT_FOUND, error
from sotopia_env.server.requests import whole_numbers
from sotopia_env.server.schema_rules import HTTP_NULL_FIELDS
from sotopia_env.validation import field_problem

router = APIRouter(prefix="/api", tags=["library"])
SECTIONS = {"scenarios": "scenarios", "characters": "characters"}
MODELS = {"scenarios": profiles.Scenario, "characters": profiles.Character}
ENTRY_ID = r"[a-z0-9][a-z0-9_-]{0,99}"  # the library's id rule (``profiles``), at most 100 characters: a file name
ADDED = {409: error("An entry with this id is in the library already.")}


def library_of(request: Request) -> Library:
    return request.app.state.simulations.library


@router.get("/models", summary="Model specs: the embedded models, and the server's default model server")
def models(request: Request) -> dict[str, Any]:
    from sotopia_env.agents.loading import NO_MODEL_SPECS
    from sotopia_env.embedded_models import list_models

    embedded = [{"alias": m.alias, "hub_id": m.hub_id, "cached": m.cached} for m in list_models()]
    servers = request.app.state.simulations.servers
    return {
        "embedded": embedded,
        "rule_agents": sorted(NO_MODEL_SPECS - {"human"}),
        "human": "human",
        "api_base": servers.default,
        "allowed_providers": sorted(servers.providers),
        "hint": "a model spec reaches only the model servers the operator listed: the api_base ones (serve "
        "--api-base, --allow-api-base), or a provider's own endpoint that serve --allow-provider names",
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


@router.get("/scenarios/{scenario_id}", summary="One scenario, whole", responses=NOT_FOUND)
def scenario(request: Request, scenario_id: str) -> dict[str, Any]:
    found = library_of(request).scenarios.get(scenario_id)
    if found is None:
        raise HTTPException(404, f"no scenario {scenario_id!r}")
    return found.model_dump(mode="json")


@router.get("/characters", summary="Characters")
def characters(request: Request) -> list[dict[str, Any]]:
    return [c.model_dump(mode="json") for c in sorted(library_of(request).characters.values(), key=lambda c: c.id)]


@router.post(
    "/scenarios", status_code=201, summary="Add a scenario (validated as the YAML library is)", responses=ADDED
)
def add_scenario(request: Request, entry: dict[str, Any] = Body(...)) -> dict[str, Any]:
    return _add(request, "scenarios", entry)


@router.post(
    "/characters", status_code=201, summary="Add a character (validated as the YAML library is)", responses=ADDED
)
def add_character(request: Request, entry: dict[str, Any] = Body(...)) -> dict[str, Any]:
    return _add(request, "characters", entry)


def _add(request: Request, section: str, entry: dict[str, Any]) -> dict[str, Any]:
    try:
        entry = whole_numbers(entry)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    folder: Path = request.app.state.library_dir
    library = library_of(request)
    entry_id = entry.get("id")
    if not isinstance(entry_id, str) or not re.fullmatch(ENTRY_ID, entry_id):
        raise HTTPException(422, "field 'id': 1 to 100 lower-case letters, digits, '_' or '-' are required")
    _check_json(section, entry)
    table: dict[str, Any] = getattr(library, SECTIONS[section])
    if entry_id in table:
        raise HTTPException(409, f"field 'id': duplicate id {entry_id!r}")
    target = folder / section / f"{entry_id}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{entry_id}.", suffix=".yaml", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yaml.safe_dump({section: [entry]}, f, sort_keys=False, allow_unicode=True)
        parsed = parse_file(Path(temp))[section][0]
    except RecursionError:  # nested deeper than YAML's writer goes: no library entry is
        Path(temp).unlink(missing_ok=True)
        raise HTTPException(422, "the entry is nested too deeply") from None
    except UnicodeEncodeError:  # a lone surrogate (\\ud800): JSON may carry one, UTF-8 may not
        Path(temp).unlink(missing_ok=True)
        raise HTTPException(422, "the entry holds text that is not valid Unicode (a lone surrogate)") from None
    except LibraryError as exc:
        Path(temp).unlink(missing_ok=True)
        message = str(exc)  # "<file>: scenarios entry 0 (id 'x'), field 'goals': ...": the file is a temporary one
        raise HTTPException(422, message[message.find("field '") :] if "field '" in message else message) from None
    os.replace(temp, target)
    table[entry_id] = parsed
    return {"id": entry_id, "file": str(target)}


def _check_json(section: str, entry: dict[str, Any]) -> None:
    """A 422 for what the body's schema refuses and YAML would take: JSON of the wrong type (``strict``), a
    relationship given as ``true``/``false``, a scenario part that comes as a YAML file only."""
    if section == "scenarios":
        for field in HTTP_NULL_FIELDS:
            if entry.get(field) is not None:
                raise HTTPException(
                    422,
                    f"field '{field}': over HTTP it is null; add such a scenario as a YAML file (serve --library-dir)",
                )
        if isinstance(entry.get("relationship"), bool):
            raise HTTPException(422, "field 'relationship': a number or a name, not true/false")
    try:
        MODELS[section].model_validate(entry, strict=True)
    except ValidationError as exc:
        raise HTTPException(422, field_problem(exc, count_more=True)) from None
    except RecursionError:
        raise HTTPException(422, "the entry is nested too deeply") from None
