"""Every CLI command and option that takes a value, given hostile values: one clear line, never a traceback,
never a stray file, never a stored episode changed.

Each case runs the command in-process (typer's runner) from an empty working folder, with a temporary HOME that
holds the default store, seeded with two episodes. The base arguments of each command would finish quickly if
the hostile value were accepted (scripted agents, no model, a tag with nothing in it); one value is replaced at a
time. Asserted for every case:

- no exception escaped the command (``SystemExit`` aside): a crash is a traceback for the user;
- exit code 0, 1 or 2, and on 1 the error is one line (2 is typer's usage box); 0 only for kinds of value
  where a strange value can still be legal (a tag, a seed, a float such as inf, an API base never called);
- nothing was created or changed outside the temporary HOME (the working folder and the input files);
- the seeded episodes are stored unchanged.

Loading the embedded model is refused (it would pull ~93 MB): a case that reaches it fails with that message,
exit 1, which still checks everything above.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO
from episode_fixtures import make_episodes
from typer.testing import CliRunner

from sotopia_env.cli.main import app
from sotopia_env.errors import UserError

TESTS = REPO / "tests"
SCENARIO = "accommodation-drum-practice"
AGENTS = ["--agents-path", str(TESTS)]
QUIET = "custom_agents:Quiet"
MAY_PASS = {"text", "float", "api_base"}  # kinds where a hostile-looking value may still be a legal one


@dataclass
class Place:
    root: Path
    home: Path
    work: Path
    inputs: Path

    def path(self, name: str) -> str:
        return str(self.inputs / name)


def hostile(place: Place) -> dict[str, list[str]]:
    """Malformed values, by the kind of value an option takes."""
    missing = str(place.root / "no" / "such" / "file.jsonl")
    files = [place.path("garbage.bin"), place.path("empty.yaml"), place.path("folder"), missing]
    return {
        "store": ["mongodb://x", "redis:/host:6379/0", "postgres://u:secret@h/db", "x", "", "sqlite:"],
        "int": ["-1", "abc", "99999999999999999999999", "1.5"],
        "float": ["nan", "-1", "abc", "inf"],
        "spec": ["no_such_module:Agent", "local:/no/such/model", ""],
        "evaluator": ["no_such_module:Judge", "local:/no/such/model", ""],
        "id": ["no-such-id", "../../etc/passwd", ""],
        "scenarios": ["no-such-id", "", "hard:bogus", ",,,"],
        "in": files + [place.path("bad_rows.jsonl")],
        "config": files + [place.path("list.yaml"), place.path("bad.yaml"), place.path("unknown_key.yaml")],
        "out": [str(place.root / "no" / "such" / "dir" / "out.json"), place.path("folder")],
        "outdir": [place.path("garbage.bin"), ""],
        "dir": [str(place.root / "no" / "such" / "dir"), place.path("garbage.bin")],
        "choice": ["bogus", ""],
        "api_base": ["not a url", "ftp://x", ""],
        "ray": ["127.0.0.1:1"],
        "port": ["-1", "abc", "70000"],
        "text": ["", "x" * 3000, "../../etc/passwd"],
    }


def cases(place: Place) -> list[tuple[list[str], str, str]]:
    """``(base arguments, option (or '@N' for the Nth argument), kind)`` for every value-taking parameter."""
    home = place.home
    run = ["run", "--agent1", QUIET, "--agent2", QUIET, "--evaluator", "none", "--max-turns", "2", *AGENTS]
    bench = ["benchmark", "--model", QUIET, "--partner", QUIET, "--evaluator", "none", "--scenarios", SCENARIO]
    bench += ["--max-turns", "2", "--tag", "fuzz", *AGENTS]
    generate = ["scenarios", "generate", "--from", place.path("seeds.txt"), "--model", "no_such_module:X"]
    generate += ["--n", "1", "--out", str(home / "generated")]
    characters = ["characters", "generate", "--model", "no_such_module:X", "--n", "1", "--out", str(home / "chars")]
    dataset = ["train", "dataset", "--tag", "seed", "--out", str(home / "ds.jsonl")]
    socialiqa = ["eval", "socialiqa", "--model", "no_such_module:X", "--data", place.path("siqa.jsonl")]
    socialiqa += ["--out", str(home / "siqa-out.jsonl")]
    table = [
        (run, {"--scenario": "scenarios", "--agent1": "spec", "--agent2": "spec", "--seed": "int",
               "--max-turns": "int", "--evaluator": "evaluator", "--dimensions": "choice", "--api-base": "api_base",
               "--store": "store", "--store-retry-seconds": "float", "--tag": "text", "--scenarios-dir": "dir",
               "--agents-path": "dir"}),
        (bench, {"--model": "spec", "--partner": "spec", "--evaluator": "evaluator", "--scenarios": "scenarios",
                 "--episodes-per-scenario": "int", "--concurrency": "int", "--max-turns": "int", "--seed": "int",
                 "--dimensions": "choice", "--max-calls": "int", "--store": "store",
                 "--store-retry-seconds": "float", "--scenarios-dir": "dir", "--json": "out", "--png": "out",
                 "--ray": "ray", "--ray-workers": "int", "--ray-gpus-per-worker": "float", "--protocol": "choice"}),
        (["report", "--tag", "seed"], {"--store": "store", "--json": "out", "--png": "out", "--tag": "text"}),
        (["leaderboard", "--tag", "seed"], {"--store": "store", "--json": "out", "--tag": "text"}),
        (["view", "--port", "-1"], {"--store": "store", "--port": "port"}),
        (generate, {"--from": "in", "--n": "int", "--out": "outdir", "--seed": "int", "--split": "choice",
                    "--concurrency": "int", "--attempts": "int", "--max-new-tokens": "int", "--temperature": "float",
                    "--scenarios-dir": "dir", "--examples": "int", "--model": "spec"}),
        (["scenarios", "list"], {"--split": "choice", "--scenarios-dir": "dir"}),
        (["scenarios", "show", SCENARIO], {"@2": "id", "--scenarios-dir": "dir"}),
        (["scenarios", "validate", place.path("bad.yaml")], {"@2": "config"}),
        (characters, {"--n": "int", "--out": "outdir", "--concurrency": "int", "--temperature": "float",
                      "--model": "spec"}),
        (["characters", "list"], {"--scenarios-dir": "dir"}),
        (["models", "pull", "smollm2-135m"], {"@2": "id"}),
        (["episodes", "list"], {"--status": "choice", "--limit": "int", "--store": "store", "--tag": "text"}),
        (["episodes", "show", "no-such-episode"], {"@2": "id", "--store": "store"}),
        (["episodes", "export", str(home / "out.jsonl"), "--tag", "seed"],
         {"@2": "out", "--format": "choice", "--store": "store"}),
        (["episodes", "import", place.path("bad_rows.jsonl")], {"@2": "in", "--format": "choice", "--store": "store"}),
        (["episodes", "evaluate", "--tag", "nothing-here", "--evaluator", "rule-based"],
         {"--evaluator": "evaluator", "--dimensions": "choice", "--concurrency": "int", "--store": "store",
          "--store-retry-seconds": "float", "--api-base": "api_base"}),
        (["episodes", "evaluate", "--tag", "seed", "--judge", "rule-based", "--swap-seats", "--resamples", "10"],
         {"--judge": "evaluator", "--resamples": "int", "--json": "out", "--tag": "text"}),
        *[(["train", c, place.path("bad.yaml")], {"@2": "config"})
          for c in ("pipeline", "bc", "sr", "rl", "grpo", "eval", "status")],
        (dataset, {"--out": "out", "--store": "store", "--min-goal": "float", "--seed": "int", "--model": "text"}),
        (socialiqa, {"--data": "in", "--limit": "int", "--max-new-tokens": "int", "--temperature": "float",
                     "--out": "out"}),
    ]  # fmt: skip
    return [(base, option, kind) for base, options in table for option, kind in options.items()]


def with_value(base: list[str], option: str, value: str) -> list[str]:
    args = list(base)
    if option.startswith("@"):
        args[int(option[1:])] = value
    elif option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    return args


def make_place(root: Path) -> Place:
    place = Place(root, root / "home", root / "work", root / "inputs")
    for folder in (place.home, place.work, place.inputs / "folder"):
        folder.mkdir(parents=True)
    (place.inputs / "garbage.bin").write_bytes(bytes(range(256)) * 4)
    (place.inputs / "empty.yaml").write_text("")
    (place.inputs / "list.yaml").write_text("- 1\n- 2\n")
    (place.inputs / "bad.yaml").write_text("model: [unclosed\n")
    (place.inputs / "unknown_key.yaml").write_text("modle: smollm2-135m\noutput_dir: out\n")
    (place.inputs / "bad_rows.jsonl").write_text('{"id": 1}\nnot json\n')
    (place.inputs / "seeds.txt").write_text("A neighbour wants to borrow a ladder.\n")
    (place.inputs / "siqa.jsonl").write_text(
        '{"context": "c", "question": "q", "answerA": "a", "answerB": "b", "answerC": "c", "label": "1"}\n'
    )
    return place


def snapshot(place: Place) -> dict[str, tuple[int, int]]:
    """Every file and folder outside HOME: (size, mtime) by path."""
    seen = {}
    for path in sorted(place.root.rglob("*")):
        if place.home in path.parents or path == place.home:
            continue
        stat = path.stat()
        seen[str(path.relative_to(place.root))] = (stat.st_size if path.is_file() else -1, stat.st_mtime_ns)
    return seen


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> Place:
    return make_place(tmp_path_factory.mktemp("fuzz"))


@pytest.fixture
def environment(place: Place, monkeypatch) -> Iterator[dict[str, str]]:
    import sotopia_env.embedded_models as embedded

    def no_model(spec: str, progress: bool = True) -> str:
        raise UserError(f"fuzz test: the model {spec!r} is not loaded here")

    monkeypatch.setattr(embedded, "resolve_model_path", no_model)
    monkeypatch.chdir(place.work)
    env = {
        "HOME": str(place.home),
        "XDG_DATA_HOME": str(place.home / ".local" / "share"),
        "XDG_CACHE_HOME": str(place.home / ".cache"),
        "SOTOPIA_ENV_CACHE": str(place.home / ".cache" / "sotopia-env"),
        "SOTOPIA_ENV_STORE": "",
        "REDIS_URL": "",
        "COLUMNS": "200",
    }
    for key, value in env.items():
        if value:
            monkeypatch.setenv(key, value)
        else:
            monkeypatch.delenv(key, raising=False)
    yield env


def stored(place: Place) -> dict[str, str]:
    from sotopia_env.episodes.sqlite_store import SQLiteStore

    store = SQLiteStore(str(place.home / ".local" / "share" / "sotopia-env" / "episodes.db"))
    try:
        return {log.id: log.model_dump_json() for log in store.iter("seed")}
    finally:
        store.close()


class _Hung(BaseException):  # not caught by a retry loop's `except Exception`
    pass


def _alarm(signum, frame):  # noqa: ANN001
    raise _Hung("the command ran past 60 s")


def invoke(args: list[str]):
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(60)
    try:
        return CliRunner().invoke(app, args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_every_command_takes_hostile_values_without_a_trace(place: Place, environment) -> None:
    from sotopia_env.episodes.sqlite_store import SQLiteStore

    seeded = SQLiteStore(str(place.home / ".local" / "share" / "sotopia-env" / "episodes.db"))
    seeded.put_many(make_episodes(2, tag="seed"))
    seeded.close()
    before_files, before_store = snapshot(place), stored(place)
    values = hostile(place)
    problems: list[str] = []
    ran = 0
    for base, option, kind in cases(place):
        for value in values[kind]:
            args = with_value(base, option, value)
            started = time.monotonic()
            result = invoke(args)
            if os.environ.get("FUZZ_LOG"):
                with open(os.environ["FUZZ_LOG"], "a") as log:
                    print(f"{time.monotonic() - started:.2f}s exit {result.exit_code} {args}", file=log)
            ran += 1
            shown = " ".join(repr(a) if not a or " " in a else a for a in args)[:300]
            crash = result.exception is not None and not isinstance(result.exception, SystemExit)
            lines = [line for line in result.output.splitlines() if line.strip()]
            if crash:
                problems.append(f"{shown}: {type(result.exception).__name__}: {result.exception}")
            elif result.exit_code not in (0, 1, 2):
                problems.append(f"{shown}: exit {result.exit_code}")
            elif result.exit_code == 0 and kind not in MAY_PASS and not (kind == "int" and option == "--seed"):
                problems.append(f"{shown}: accepted (exit 0)")
            elif result.exit_code == 1 and (len(lines) != 1 or not lines[0].startswith("error:")):
                problems.append(f"{shown}: exit 1 without one error line: {result.output[-500:]!r}")
            elif "Traceback" in result.output:
                problems.append(f"{shown}: a traceback in the output")
            after = snapshot(place)
            if after != before_files:
                changed = sorted(set(after.items()) ^ set(before_files.items()))
                problems.append(f"{shown}: created or changed outside HOME: {changed[:4]}")
                before_files = after
            if stored(place) != before_store:
                problems.append(f"{shown}: a stored episode changed")
                before_store = stored(place)
    assert ran > 200
    assert not problems, f"{len(problems)} of {ran} cases:\n" + "\n".join(problems)
