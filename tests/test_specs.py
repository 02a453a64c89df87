"""Typed specs, parsed once (issue #58): each spec form parses to its kind, a bad spec is one line naming it, agent
kinds come from a registry, and no former site reads a spec's string again."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from sotopia_env.agents.baselines import SPECS as BASELINE_SPECS
from sotopia_env.agents.loading import load_agent
from sotopia_env.agents.specs import (
    AGENT_KINDS,
    CUSTOM,
    MODEL,
    NO_MODEL_SPECS,
    AgentSpec,
    AgentSpecError,
    agent_kind_names,
    register_agent_kind,
    unregister_agent_kind,
)
from sotopia_env.specs import DEFAULT_MODEL, EvaluatorSpec, ModelSpec, SpecError

REPO = Path(__file__).resolve().parents[1]
SERVERS = "http://127.0.0.1:8000/v1"


# -- model specs ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "source", "name", "provider"),
    [
        (DEFAULT_MODEL, "embedded", DEFAULT_MODEL, None),
        ("local:Qwen/Qwen2.5-0.5B-Instruct", "local", "Qwen/Qwen2.5-0.5B-Instruct", None),
        ("local:/models/mine", "local", "/models/mine", None),
        ("litellm:openai/x", "litellm", "openai/x", "openai"),
        ("litellm:my-model", "litellm", "my-model", None),
        ("gpt-4o-mini", "hosted", "gpt-4o-mini", None),
        ("anthropic/claude-3-5-haiku", "hosted", "anthropic/claude-3-5-haiku", "anthropic"),
        ("Qwen/Qwen2.5-7B-Instruct", "hosted", "Qwen/Qwen2.5-7B-Instruct", "Qwen"),
    ],
)
def test_each_model_spec_form_parses_to_its_source(text, source, name, provider):
    spec = ModelSpec.parse(text)
    assert (spec.text, spec.source, spec.name, spec.provider) == (text, source, name, provider)
    assert str(spec) == text
    assert ModelSpec.parse(spec) is spec  # a typed spec passes through
    assert spec.is_local == (source in ("embedded", "local"))


def test_a_model_directory_is_a_local_spec(tmp_path):
    spec = ModelSpec.parse(str(tmp_path))
    assert (spec.source, spec.name, spec.is_local) == ("directory", str(tmp_path), True)
    assert spec.route(SERVERS) == "local"  # run here, api_base or not


@pytest.mark.parametrize(
    ("text", "at_server", "hosted"),
    [
        ("my-model", "openai_http", "litellm"),
        ("openai/x", "openai_http", "litellm"),
        ("hosted_vllm/x", "openai_http", "litellm"),
        ("Qwen/Qwen2.5-7B-Instruct", "openai_http", "litellm"),
        ("ollama/llama3", "litellm", "litellm"),
        ("anthropic/claude", "litellm", "litellm"),
        ("litellm:openai/x", "litellm", "litellm"),
        (DEFAULT_MODEL, "local", "local"),
        ("local:x/y", "local", "local"),
    ],
)
def test_the_route_of_a_model_spec(text, at_server, hosted):
    """As ``resolve.uses_openai_http`` said before the specs were typed."""
    from sotopia_env.backends.endpoints import ModelServers
    from sotopia_env.backends.resolve import uses_openai_http

    spec = ModelSpec.parse(text)
    assert spec.route(ModelServers.parse(SERVERS)) == at_server
    assert spec.route(None) == hosted
    assert uses_openai_http(text, SERVERS) == (at_server == "openai_http")


def test_the_server_model_name_drops_only_a_routing_prefix():
    from sotopia_env.backends.openai_http import server_model_name

    assert server_model_name("openai/gpt-4o") == "gpt-4o"
    assert server_model_name("hosted_vllm/Qwen/Qwen2.5") == "Qwen/Qwen2.5"
    assert server_model_name("Qwen/Qwen2.5") == "Qwen/Qwen2.5"
    assert server_model_name(ModelSpec.parse("my-model")) == "my-model"


# -- agent specs and their registry ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["human", "rule-partner", "rule-player", "oracle-player", *BASELINE_SPECS])
def test_a_named_agent_kind_parses_to_itself(name):
    spec = AgentSpec.parse(name)
    assert (spec.kind, spec.model, spec.calls_model) == (name, None, False)
    assert name in NO_MODEL_SPECS and name in agent_kind_names(calls_model=False)


def test_module_class_and_model_specs_parse_by_form():
    custom = AgentSpec.parse("custom_agents:PoliteAgent")
    assert (custom.kind, custom.module, custom.attr, custom.is_custom) == (CUSTOM, "custom_agents", "PoliteAgent", True)
    for text in (DEFAULT_MODEL, "openai/gpt-4o", "local:some/path", "model", "custom", "Human"):
        spec = AgentSpec.parse(text)
        assert spec.kind == MODEL and spec.calls_model and spec.model == ModelSpec.parse(text), text
    assert AgentSpec.parse("local:Thing").kind == MODEL  # 'local:' is a model, never module:Class
    assert AgentSpec.parse(ModelSpec.parse("gpt-4o")).model.name == "gpt-4o"


def test_an_agent_kind_is_registered_by_a_call_or_a_decorator_and_built_by_load_agent():
    class Polite:
        async def act(self, observation):
            return None

    @register_agent_kind("polite-bot")
    def build(spec, **options):
        assert spec.kind == "polite-bot" and "settings" in options
        return Polite()

    try:
        assert AgentSpec.parse("polite-bot").kind == "polite-bot"
        assert isinstance(load_agent("polite-bot"), Polite)
        register_agent_kind("polite-bot", build)  # the same build again: no conflict
        with pytest.raises(AgentSpecError, match="'polite-bot' is taken"):
            register_agent_kind("polite-bot", lambda spec, **o: Polite())
        with pytest.raises(AgentSpecError, match="lower case"):
            register_agent_kind("Polite Bot", build)
    finally:
        unregister_agent_kind("polite-bot")
    assert AgentSpec.parse("polite-bot").kind == MODEL


def test_an_installed_package_adds_agent_kinds_through_the_entry_point_group(monkeypatch):
    import sotopia_env.registry as registry

    class Outside:
        async def act(self, observation):
            return None

    def entry(name, value, loaded):
        return SimpleNamespace(name=name, value=value, load=loaded)

    def broken():
        raise ImportError("no module named nowhere")

    points = {"sotopia_env.agents": [entry("outside-bot", "pkg.bots:Outside", lambda: Outside)]}
    monkeypatch.setattr(registry, "entry_points", lambda group: points.get(group, []))
    with AGENT_KINDS.scoped(reload=True):
        assert AgentSpec.parse("outside-bot").kind == "outside-bot"
        assert isinstance(load_agent("outside-bot"), Outside)
    points["sotopia_env.agents"] = [entry("bad-bot", "nowhere:Bot", broken)]
    with AGENT_KINDS.scoped(reload=True):
        with pytest.raises(AgentSpecError) as caught:
            AgentSpec.parse("bad-bot")
        assert "'bad-bot'" in str(caught.value) and "\n" not in str(caught.value)


# -- evaluator specs --------------------------------------------------------------------------------------------


def test_evaluator_specs():
    assert EvaluatorSpec.parse(" None ").is_none and EvaluatorSpec.parse("none").model is None
    judge = EvaluatorSpec.parse(" Rule-Based ")
    assert (judge.key, judge.is_none) == ("rule-based", False)
    model = EvaluatorSpec.parse("openai/gpt-4o")
    assert model.model == ModelSpec.parse("openai/gpt-4o") and model.key == "openai/gpt-4o"
    assert EvaluatorSpec.parse(ModelSpec.parse(DEFAULT_MODEL)).model.source == "embedded"


def test_make_evaluator_takes_the_typed_spec():
    from sotopia_env.evaluators import RuleBasedEvaluator, make_evaluator

    assert make_evaluator(EvaluatorSpec.parse("none")) is None
    assert isinstance(make_evaluator(EvaluatorSpec.parse("rule-based")), RuleBasedEvaluator)


# -- bad specs: one line, naming the spec ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "value", "named"),
    [
        (ModelSpec.parse, "", "model spec ''"),
        (ModelSpec.parse, "   ", "model spec '   '"),
        (ModelSpec.parse, "local:", "model spec 'local:'"),
        (ModelSpec.parse, "litellm:", "model spec 'litellm:'"),
        (ModelSpec.parse, None, "model spec None"),
        (ModelSpec.parse, "a\nb", "model spec 'a\\nb'"),
        (ModelSpec.parse, "x" * 3000, "model spec 'xxxx"),
        (AgentSpec.parse, "", "agent spec ''"),
        (AgentSpec.parse, "local:", "agent spec 'local:'"),
        (AgentSpec.parse, 7, "agent spec 7"),
        (EvaluatorSpec.parse, "", "evaluator spec ''"),
        (EvaluatorSpec.parse, "local:", "evaluator spec 'local:'"),
    ],
)
def test_a_bad_spec_is_one_line_naming_it(parse, value, named):
    with pytest.raises(SpecError) as caught:
        parse(value)
    message = str(caught.value)
    assert message.startswith(named) and "\n" not in message and len(message) < 300, message


def test_load_agent_says_a_misspelt_agent_name_in_one_line():
    from sotopia_env.embedded_models import UnknownModel

    with pytest.raises(UnknownModel) as caught:
        load_agent("rule-partnr")
    assert "agent spec 'rule-partnr'" in str(caught.value) and "'rule-partner'" in str(caught.value)


# -- parsed in one place ----------------------------------------------------------------------------------------

# the modules that read spec strings before the specs were typed (issue #58); they read parsed fields now
FORMER_SITES = (
    "agents/loading.py",
    "agents/rule_specs.py",
    "sotopia_env/backends/resolve.py",
    "sotopia_env/backends/openai_http.py",
    "sotopia_env/backends/litellm_backend.py",
    "sotopia_env/evaluators/factory.py",
    "server/allowed_servers.py",
)
SPEC_PREFIXES = ("local:", "litellm:")
SPEC_SEPARATORS = (":", "/")
AGENT_NAMES = {"RULE_PARTNER", "RULE_PLAYER", "ORACLE_PLAYER", "HUMAN", "NO_EVALUATOR", "VERIFIABLE", "DEFAULT_MODEL"}


PREFIX_NAMES = {"LOCAL_PREFIX": "local:", "LITELLM_PREFIX": "litellm:"}  # sotopia_env.specs' names of the prefixes


def _const(node: ast.AST) -> object:
    """A constant's value (a tuple of constants as a tuple; a prefix's name as its text); None for anything else."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple):
        return tuple(_const(e) for e in node.elts)
    return PREFIX_NAMES.get(node.id) if isinstance(node, ast.Name) else None


def spec_reads(source: str) -> list[tuple[int, str]]:
    """Where ``source`` reads a spec's string: a spec prefix tested or cut (``.startswith("local:")``), the
    string split (``model.partition("/")``), ``":" in spec``, a ``Path(...).is_dir()`` probe,
    ``spec.strip().lower()``, or the text compared with a name (``spec == RULE_PARTNER``, ``spec == "human"``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, args = node.func.attr, [_const(a) for a in node.args]
            if method in ("startswith", "removeprefix") and any(
                a in SPEC_PREFIXES or (isinstance(a, tuple) and set(a) & set(SPEC_PREFIXES)) for a in args
            ):
                found.append((node.lineno, f".{method}({args[0]!r})"))
            elif method in ("partition", "split", "rpartition", "rsplit") and _spec_name(node.func.value):
                found.append((node.lineno, f".{method}({(args or [''])[0]!r}) of a spec"))
            elif method == "is_dir" and isinstance(node.func.value, ast.Call):
                found.append((node.lineno, "Path(...).is_dir()"))
            elif method == "lower" and isinstance(node.func.value, ast.Call):
                inner = node.func.value.func
                if isinstance(inner, ast.Attribute) and inner.attr == "strip" and _spec_name(inner.value):
                    found.append((node.lineno, ".strip().lower() of a spec"))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = node.left, node.comparators[0]
            if isinstance(node.ops[0], (ast.In, ast.NotIn)) and _const(left) in SPEC_SEPARATORS:
                found.append((node.lineno, f"{_const(left)!r} in a spec"))
            if isinstance(node.ops[0], (ast.Eq, ast.NotEq)) and _spec_name(left):
                if isinstance(right, ast.Name) and right.id in AGENT_NAMES:
                    found.append((node.lineno, f"a spec == {right.id}"))
                elif isinstance(_const(right), str):
                    found.append((node.lineno, f"a spec == {_const(right)!r}"))
    return found


def _spec_name(node: ast.AST) -> bool:
    """A variable that holds a spec's text: ``spec``, ``evaluator``, ``model``, ``text`` and the like."""
    return isinstance(node, ast.Name) and node.id in {"spec", "evaluator", "model", "judge", "agent", "value", "text"}


def test_no_former_site_reads_a_spec_string():
    problems = [
        f"{path}:{line}: {what}"
        for path in FORMER_SITES
        for line, what in spec_reads((REPO / path).read_text(encoding="utf-8"))
    ]
    assert problems == [], "read the typed spec's fields (sotopia_env.specs / agents.specs) instead"


PLANTED = """
from pathlib import Path

def is_local(spec):
    return spec.startswith("local:") or Path(spec).is_dir()

def provider(model):
    prefix, _, rest = model.partition("/")
    return prefix if ":" in model else rest

def judge_key(evaluator, RULE_PARTNER):
    return evaluator.strip().lower() if evaluator == RULE_PARTNER else None

def human(spec, LOCAL_PREFIX):
    return spec == "human" or spec.removeprefix(LOCAL_PREFIX)
"""


def test_the_scan_finds_planted_spec_reads():
    whats = " | ".join(what for _, what in spec_reads(PLANTED))
    for what in (".startswith('local:')", "Path(...).is_dir()", ".partition('/') of a spec", "':' in a spec"):
        assert what in whats, what
    assert ".strip().lower() of a spec" in whats and "a spec == RULE_PARTNER" in whats
    assert "a spec == 'human'" in whats and ".removeprefix('local:')" in whats
    # the spec modules themselves are where the reading happens
    assert spec_reads((REPO / "sotopia_env/specs.py").read_text(encoding="utf-8"))


# -- one default model ------------------------------------------------------------------------------------------

DEFAULT_MODEL_AT = {"sotopia_env/specs.py", "sotopia_env/embedded_models.py"}  # its home; the embedded registry
PENDING = {  # modules that still write the default model out, whose owners move them to DEFAULT_MODEL (issue #58)
    "training/config.py",
    "training/base_config.py",
}


def test_the_default_model_is_written_once():
    from sotopia_env.embedded_models import EMBEDDED_MODELS

    assert DEFAULT_MODEL in EMBEDDED_MODELS
    written = []
    for folder in ("sotopia_env", "agents", "episodes", "training", "server", "cli"):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel in DEFAULT_MODEL_AT or rel in PENDING:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and node.value == DEFAULT_MODEL:
                    written.append(f"{rel}:{node.lineno}")
    assert written == [], "import DEFAULT_MODEL from sotopia_env.specs"
