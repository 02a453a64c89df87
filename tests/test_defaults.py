"""Each default and limit is declared once (issue #58): an ``ast`` scan of the package for the known names.

- A constant that holds a default or a limit (``DEFAULT_CONCURRENCY``, ``MAX_CALLS``, ...) is assigned a number in
  its one home (``HOMES``) and nowhere else.
- A parameter, a field or a CLI option of a known name (``concurrency``, ``max_turns``, ``max_per_client``, the
  store retry, a remote backend's timeout and retries) never takes a number of its own as its default: it takes
  the constant. Seen: a function's parameter default, an (annotated) assignment, ``Field(N)``/``field(default=N)``,
  ``typer.Option(N, "--flag")`` (the flag or the parameter names it).
- A limit is not written again as a number: ``typer.Option(max=N)`` or ``Field(le=N)`` of a limited name.

``ALLOWED`` lists the few defaults that share a name but are another thing, each with the reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("sotopia_env", "agents", "episodes", "training", "server", "cli")  # the package's folders

LIMITS = "sotopia_env/limits.py"
JOB_FIELDS = "episodes/job_fields.py"
REMOTE = "sotopia_env/backends/remote.py"
HOMES = {  # each constant that holds a default or a limit: the one module that declares it
    "DEFAULT_MAX_TURNS": LIMITS,
    "MAX_TURNS_LIMIT": LIMITS,
    "DEFAULT_CONCURRENCY": LIMITS,
    "MAX_CONCURRENCY": LIMITS,
    "ANSWER_RETRIES": LIMITS,
    "DEFAULT_RETRY_SECONDS": JOB_FIELDS,
    "MAX_EPISODES_PER_SCENARIO": JOB_FIELDS,
    "MAX_CALLS": JOB_FIELDS,
    "HTTP_MAX_PER_CLIENT": JOB_FIELDS,
    "HTTP_MAX_TURNS": JOB_FIELDS,
    "HTTP_EPISODES_PER_SCENARIO": JOB_FIELDS,
    "DEFAULT_TURN_TIMEOUT": JOB_FIELDS,
    "DEFAULT_MAX_SESSIONS": LIMITS,
    "DEFAULT_MAX_RETRIES": REMOTE,
    "DEFAULT_TIMEOUT_S": REMOTE,
    "DEFAULT_BACKOFF_BASE_S": REMOTE,
    "DEFAULT_MAX_CONCURRENCY": REMOTE,
}
# names whose default is always one of those constants, never a number written in place
NAMED = {
    "concurrency",
    "max_turns",
    "max_per_client",
    "retry_seconds",
    "store_retry_seconds",
    "max_retries",
    "MAX_RETRIES",
    "timeout_s",
    "backoff_base_s",
    "max_concurrency",
    "turn_timeout",
    "turn_timeout_s",
    "max_sessions",
}
LIMIT_OF = {  # a limited name: the constant that holds its limit
    "concurrency": "MAX_CONCURRENCY",
    "max_turns": "MAX_TURNS_LIMIT",
    "episodes_per_scenario": "MAX_EPISODES_PER_SCENARIO",
    "max_calls": "MAX_CALLS",
}
ALLOWED = {  # (module, name): why this number is another default, not a second declaration of the shared one
    ("episodes/sotopia_protocol.py", "max_turns"): "SOTOPIA's published protocol: 20 turns, whatever our default",
    ("training/episode_grpo.py", "max_turns"): "episode GRPO's own short episodes (8 turns)",
    ("cli/generate_cmds.py", "MAX_CONCURRENCY"): "generations in flight: their own cap (4096)",
    ("training/served_policy.py", "timeout_s"): "a served policy's completion (600 s), not a chat backend's call",
}


def package_sources() -> dict[str, str]:
    """Every module of the package: its path from the repository root -> its text."""
    return {
        path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8")
        for folder in FOLDERS
        for path in sorted((REPO / folder).rglob("*.py"))
    }


def _number(node: ast.AST | None) -> bool:
    """A number written in place: ``8``, ``60.0``, ``-1``, ``10_000``, ``2**31 - 1`` (not a bool, not a name)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return _number(node.operand)
    if isinstance(node, ast.BinOp):
        return _number(node.left) and _number(node.right)
    return False


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _flag_name(call: ast.Call) -> str | None:
    """``typer.Option(8, "--max-turns")`` -> ``max_turns`` (the first long flag among its arguments)."""
    for arg in call.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
            return arg.value[2:].split("/")[0].replace("-", "_")
    return None


def _value_findings(name: str | None, value: ast.AST | None) -> Iterator[tuple[str, int, str]]:
    """What a declaration of ``name`` with ``value`` declares again: (name, line, what)."""
    if value is None:
        return
    if isinstance(value, ast.Call) and _callee(value) in ("Option", "Field", "field"):
        name = (_flag_name(value) if _callee(value) == "Option" else None) or name
        default = value.args[0] if value.args and _callee(value) != "field" else _keyword(value, "default")
        if name in NAMED and _number(default):
            yield name, value.lineno, f"the default of {name!r} as a number"
        limit = _keyword(value, "max" if _callee(value) == "Option" else "le")
        if name in LIMIT_OF and _number(limit):
            yield LIMIT_OF[name], value.lineno, f"the limit of {name!r} as a number ({LIMIT_OF[name]})"
    elif name in NAMED and _number(value):
        yield name, value.lineno, f"the default of {name!r} as a number"


def _annotation_limits(name: str, annotation: ast.AST) -> Iterator[tuple[str, int, str]]:
    """``x: Annotated[int, Field(le=10_000)]``: a limit written in an annotation."""
    if name not in LIMIT_OF:
        return
    for node in ast.walk(annotation):
        if isinstance(node, ast.Call) and _callee(node) == "Field" and _number(_keyword(node, "le")):
            yield LIMIT_OF[name], node.lineno, f"the limit of {name!r} as a number ({LIMIT_OF[name]})"


def declarations(source: str) -> Iterator[tuple[str, int, str]]:
    """Every declaration in ``source`` of a known default or limit with a number: (name, line, what)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                name = target.id if isinstance(target, ast.Name) else None
                if name in HOMES and _number(node.value):
                    yield name, node.lineno, f"{name} = a number"
                yield from _value_findings(name, node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
            if name in HOMES and _number(node.value):
                yield name, node.lineno, f"{name} = a number"
            yield from _value_findings(name, node.value)
            yield from _annotation_limits(name, node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            pairs = [*zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)]
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
            for arg, default in pairs:
                yield from _value_findings(arg.arg, default)
                if arg.annotation is not None:
                    yield from _annotation_limits(arg.arg, arg.annotation)


def problems(sources: dict[str, str]) -> list[str]:
    """Each default or limit declared more than once, or away from its home; one line each."""
    out, homed = [], {name: 0 for name in HOMES}
    for path, source in sources.items():
        for name, line, what in declarations(source):
            if (path, name) in ALLOWED:
                continue
            if name in HOMES and path == HOMES[name] and what == f"{name} = a number":
                homed[name] += 1
                continue
            where = f"its home is {HOMES[name]}" if name in HOMES else "take the shared constant (HOMES)"
            out.append(f"{path}:{line}: {what} declared again; {where}")
    out += [f"{HOMES[name]}: {name} declared {count} times, not once" for name, count in homed.items() if count != 1]
    return out


def test_each_default_and_limit_is_declared_once():
    assert problems(package_sources()) == []


def test_the_allowed_exceptions_still_exist():
    """An exception that no longer matches anything is stale: remove it."""
    sources = package_sources()
    found = {(path, name) for path, source in sources.items() for name, _, _ in declarations(source)}
    assert set(ALLOWED) <= found


PLANTED = """
import typer
from pydantic import BaseModel, Field

DEFAULT_CONCURRENCY = 8
MAX_CALLS = 1_000_000


def batch(store, concurrency: int = 8, *, max_turns=20):
    ...


StoreRetry = typer.Option(60.0, "--store-retry-seconds", min=0)


def bench(episodes_per_scenario: int = typer.Option(1, "--episodes-per-scenario", max=10_000)):
    ...


class Caps(BaseModel):
    max_per_client: int = Field(64, ge=1)


class Backend:
    def __init__(self, model, timeout_s: float = 60.0, max_retries: int = 4) -> None:
        self.model = model
"""


def test_the_scan_finds_planted_duplicates():
    """The scan can fail: a synthetic module declaring each kind of duplicate is caught at each one."""
    sources = package_sources()
    assert problems(sources) == []
    found = problems({**sources, "episodes/planted.py": PLANTED})
    planted = [line for line in found if line.startswith("episodes/planted.py:")]
    kinds = " | ".join(planted)
    for what in (
        "DEFAULT_CONCURRENCY = a number",
        "MAX_CALLS = a number",
        "the default of 'concurrency'",
        "the default of 'max_turns'",
        "the default of 'store_retry_seconds'",
        "the limit of 'episodes_per_scenario'",
        "the default of 'max_per_client'",
        "the default of 'timeout_s'",
        "the default of 'max_retries'",
    ):
        assert what in kinds, what
    assert len(planted) == 9, planted
    # a second declaration in a module of the package is caught the same way
    moved = sources[LIMITS].replace("DEFAULT_MAX_TURNS = 20", "DEFAULT_MAX_TURNS = DEFAULT_CONCURRENCY * 2 + 4")
    assert f"{LIMITS}: DEFAULT_MAX_TURNS declared 0 times, not once" in problems({**sources, LIMITS: moved})


def test_the_cli_takes_the_specs_limits_and_help():
    """``benchmark``'s options carry ``BenchmarkSpec``'s limits and help (the typer options are not re-typed)."""
    import typer.main

    from sotopia_env.cli.main import app
    from sotopia_env.episodes.benchmark import BenchmarkSpec

    command = typer.main.get_command(app).commands["benchmark"]
    params = {p.name: p for p in command.params}
    for name in ("episodes_per_scenario", "max_calls", "concurrency", "max_turns"):
        field = BenchmarkSpec.model_fields[name]
        schema = BenchmarkSpec.model_json_schema()["properties"][name]
        schema = next((s for s in schema.get("anyOf", [schema]) if s.get("type") == "integer"), schema)
        option = params[name]
        assert option.max == schema["maximum"], name
        assert option.help == (field.description or schema.get("description")), name
        if field.default is not None:
            assert option.default == field.default, name
