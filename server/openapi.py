"""The server's OpenAPI document, made to say what the server answers (``/api/openapi.json``).

FastAPI declares each route's own answers (``responses=`` on the routes: 404 on every ``{id}`` route, 409, 429)
but not what the gate in front of it answers, and it declares its own ``HTTPValidationError`` for 422 while the
server answers every error as one ``ErrorBody``, ``{"detail": "<one line naming what and where>"}``. ``describe``
fills that in for every operation: the 422 and every other error as ``ErrorBody``; 400 (a ``Host`` the server
does not serve, or a body that is not JSON), 401 where a token is set, 403 on unsafe methods (a foreign
``Origin``), 411 and 413 on bodies (``security.Gate``), and 503 (the store is down). It also makes the bodies'
schemas carry the rules the handlers enforce (``schema_rules``): a request the document allows is one the server
takes, or refuses for what no schema can say (403 not allowed, 404 not found, 409 a conflict, 429 too many).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field
from starlette.routing import compile_path

from sotopia_env.server.caps import HttpCaps
from sotopia_env.server.schema_rules import with_rules

ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
UNSAFE = ("post", "put", "patch", "delete")
WITH_BODY = ("post", "put", "patch")


class ErrorBody(BaseModel):
    """Every error the server answers (4xx and 5xx), HTML pages aside."""

    detail: str = Field(description="One line naming what was refused and where.")


def error(description: str) -> dict[str, Any]:
    """A ``responses=`` entry for a route: ``description``, with ``ErrorBody`` as its JSON body."""
    return {"model": ErrorBody, "description": description}


NOT_FOUND = {404: error("No such resource.")}
REFUSED = {  # what a job's POST answers besides 202 and 422 (``requests.RequestRefused``)
    403: error(
        "Not allowed: code agents without serve --allow-code-agents, a model server (api_base, or a provider's "
        "default endpoint) the operator did not list, or an Origin that is not this server's."
    ),
    404: error("A scenario the library lacks."),
    409: error("The request does not fit what it names: a spec count or a rule agent the scenario has no seat for."),
    424: error(
        "A model service the request needs cannot work: a key refused or missing, a server that does not answer, "
        "or a model it does not serve (the preflight's one line names the model, the endpoint and the fix)."
    ),
    429: error("Too many simulations and benchmarks of this client are queued or running."),
}


def allowed_methods(app: FastAPI, path: str) -> str | None:
    """A 405's ``Allow`` for ``path``: the methods the document declares on it (None where it declares none)."""
    for template, operations in app.openapi().get("paths", {}).items():
        if compile_path(template)[0].match(path):
            return ", ".join(sorted(method.upper() for method in operations))
    return None


def describe(app: FastAPI, *, token: bool, caps: HttpCaps | None = None) -> None:
    """Make ``app.openapi()`` declare the gate's answers and ``ErrorBody`` for every error (see the module), and
    ``caps`` (the server's ``HttpCaps``) as the maxima of the fields they cap."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _described(
                get_openapi(title=app.title, version=app.version, routes=app.routes, description=app.description),
                token,
                caps,
            )
        return app.openapi_schema

    app.openapi = build  # type: ignore[method-assign]


def _described(schema: dict[str, Any], token: bool, caps: HttpCaps | None) -> dict[str, Any]:
    gate = {
        "400": "A Host this server does not serve (DNS rebinding is refused this way).",
        "503": "The episode store is unavailable.",
    }
    if token:
        gate["401"] = "No token, or a wrong one: send Authorization: Bearer <token>."
    for operations in schema.get("paths", {}).values():
        for method, operation in operations.items():
            answers: dict[str, Any] = operation.setdefault("responses", {})
            statuses = dict(gate)
            if method in UNSAFE:
                statuses["403"] = "An Origin header that is not this server's."
            if method in WITH_BODY:
                statuses["400"] = "A Host this server does not serve, or a body that is not JSON."
                statuses["411"] = "A body without Content-Length."
                statuses["413"] = "A body over the server's size limit."
            for status, description in statuses.items():
                answers.setdefault(status, {"description": description})
            for status, answer in answers.items():
                if status[0] in "45":
                    answer["content"] = {"application/json": {"schema": ERROR_REF}}
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    components["ErrorBody"] = ErrorBody.model_json_schema()
    for field, (cap, _) in (caps.fields() if caps else {}).items():
        for component in components.values():
            declared = component.get("properties", {}).get(field, {})
            if "maximum" in declared:
                declared["maximum"] = min(declared["maximum"], cap)
    return with_rules(schema)
