"""The rules the handlers enforce, written into the OpenAPI document (``openapi.describe`` calls ``with_rules``), so
that a request the document allows is one the server takes, or refuses only for what no schema can say.

- ``ModelServers`` (every ``api_base``): a URL or a comma list of them, or a non-empty list; each ``http(s)://``
  without whitespace.
- ``BenchmarkRequest`` (the CLI's ``BenchmarkSpec``): ``protocol`` one of the published protocols, which fix
  ``scenarios``, ``episodes_per_scenario``, ``max_turns`` and ``dimensions``; ``dimensions`` as
  ``requests.DIMENSIONS_PATTERN``.
- ``POST /api/characters`` and ``POST /api/scenarios``: the library's own models (``profiles.Character``,
  ``profiles.Scenario``), with the id rule of a library entry (a file name), text that is not blank once stripped
  (the models strip whitespace), relationships by number or name, and a scenario's seat rules (one branch per seat
  count: 2 to 8 goals, ``multi-party`` exactly on three seats or more). A scenario's per-seat ``constraints``,
  per-pair ``relationships``, ``game`` and ``verifiable`` facts obey rules no schema can say (a ``min_age`` at most
  its ``max_age``: a schema compares no two fields; a symmetric matrix; a rule set's own checks), so over HTTP
  they are null (``library_routes``): such scenarios come as YAML files.
"""

from __future__ import annotations

import copy
from typing import Any

from sotopia_env.profiles import MAX_SEATS, Relationship
from sotopia_env.server.requests import DIMENSIONS_PATTERN

# a scenario's parts whose rules are more than a schema can say: they come as YAML files only
HTTP_NULL_FIELDS = ("constraints", "relationships", "game", "verifiable")

# what pydantic's str_strip_whitespace strips (Unicode's White_Space), as a character class body
WHITE_SPACE = r"\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
URL = r"https?://[^\s,]+"
ENTRY_ID = {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_-]{0,99}$", "title": "Id"}


def not_blank(length: int = 1) -> str:
    """A pattern for text at least ``length`` characters long once stripped (as the library's models strip it)."""
    if length <= 1:
        return f"[^{WHITE_SPACE}]"
    return rf"^[{WHITE_SPACE}]*[^{WHITE_SPACE}][\s\S]{{{length - 2},}}[^{WHITE_SPACE}][{WHITE_SPACE}]*$"


def with_rules(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (an OpenAPI document) with the rules of the module docstring added where their parts are."""
    components = schema.get("components", {}).get("schemas", {})
    if "ModelServers" in components:
        components["ModelServers"] = _model_servers(components["ModelServers"])
    if "BenchmarkRequest" in components:
        _benchmark_rules(components["BenchmarkRequest"])
    paths = schema.get("paths", {})
    for path, model in (("/api/characters", "Character"), ("/api/scenarios", "Scenario")):
        operation = paths.get(path, {}).get("post")
        if operation is not None:
            name = _add_entry_model(components, model)
            content = operation["requestBody"]["content"]["application/json"]
            content["schema"] = {"$ref": f"#/components/schemas/{name}"}
    return schema


def _model_servers(declared: dict[str, Any]) -> dict[str, Any]:
    comma_list = rf"^[\s,]*{URL}(\s*,[\s,]*{URL})*[\s,]*$"
    return {
        "title": declared.get("title", "ModelServers"),
        "description": declared.get("description", ""),
        "anyOf": [
            {"type": "string", "maxLength": 2000, "pattern": comma_list},
            {"type": "array", "minItems": 1, "items": {"type": "string", "maxLength": 2000, "pattern": f"^{URL}$"}},
        ],
    }


def _benchmark_rules(spec: dict[str, Any]) -> None:
    from sotopia_env.episodes.sotopia_protocol import get_protocol, protocols

    properties = spec["properties"]
    names = list(protocols())
    properties["protocol"] = {**properties["protocol"], "anyOf": [{"enum": names, "type": "string"}, {"type": "null"}]}
    properties["dimensions"] = {**properties["dimensions"], "pattern": DIMENSIONS_PATTERN}
    fixed = []
    for name in names:
        protocol = get_protocol(name)
        fixed.append(
            {
                "if": {"properties": {"protocol": {"const": name}}, "required": ["protocol"]},
                "then": {
                    "properties": {
                        "scenarios": {"const": "test"},
                        "episodes_per_scenario": {"const": 1},
                        "max_turns": {"const": protocol.max_turns},
                        "dimensions": {"const": protocol.dimensions},
                    }
                },
            }
        )
    spec["allOf"] = fixed


def _add_entry_model(components: dict[str, Any], model: str) -> str:
    """The library model ``model`` and what it refers to, as components (``<model>Entry``); its name."""
    from sotopia_env import profiles

    schema = getattr(profiles, model).model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in schema.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components["Relationship"] = {
        "title": "Relationship",
        "description": "How two characters know each other: a number or a name.",
        "anyOf": [
            {"type": "integer", "enum": [r.value for r in Relationship]},
            {"type": "string", "enum": [r.name for r in Relationship] + [str(r.value) for r in Relationship]},
        ],
    }
    _strings_not_blank(schema)
    schema["properties"]["id"] = dict(ENTRY_ID)
    name = f"{model}Entry"
    components[name] = _per_seat_count(schema) if model == "Scenario" else schema
    return name


def _strings_not_blank(schema: dict[str, Any]) -> None:
    """The models strip whitespace before checking a length: a ``minLength`` is of the stripped text."""
    for declared in schema.get("properties", {}).values():
        if declared.get("type") == "string" and "minLength" in declared:
            declared["pattern"] = not_blank(declared["minLength"])


def _per_seat_count(scenario: dict[str, Any]) -> dict[str, Any]:
    """A scenario over HTTP, one branch per seat count (2 to 8): as many goals, not blank; the ``multi-party`` tag
    exactly from three seats. The ``HTTP_NULL_FIELDS`` (rules no schema can say) come as YAML files: null here."""
    base = copy.deepcopy(scenario)
    for field in HTTP_NULL_FIELDS:
        base["properties"][field] = {"type": "null", "description": "Over HTTP, null: add it as a YAML file."}
    multi_party = {"contains": {"const": "multi-party"}}
    branches = []
    for n in range(2, MAX_SEATS + 1):
        branch = copy.deepcopy(base)
        properties = branch["properties"]
        properties["goals"] = {**properties["goals"], "minItems": n, "maxItems": n}
        properties["goals"]["items"] = {"type": "string", "pattern": not_blank()}
        tags = properties["tags"]
        properties["tags"] = {**tags, **(multi_party if n >= 3 else {"not": multi_party})}
        if n >= 3:
            branch["required"] = [*branch["required"], "tags"]
        branches.append({key: value for key, value in branch.items() if key not in ("title", "description")})
    return {
        "title": scenario.get("title", "Scenario"),
        "description": scenario.get("description", ""),
        "anyOf": branches,
    }
