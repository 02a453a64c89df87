"""sotopia-env side by side with ``sotopia`` (PyPI 0.1.5) on the same workload and the same server.

    python benchmarks/vs_sotopia.py                    # 32 episodes, concurrency 8, 20 turns, 200 ms per call
    python benchmarks/vs_sotopia.py --concurrency 8,32 --episodes 64
    python benchmarks/vs_sotopia.py --quick            # tiny sizes (the smoke test; sotopia only if installed)

The first run creates a virtualenv (``--venv``, default ``~/.cache/sotopia-env/bench-venv``) and installs
``sotopia==0.1.5`` there with pip (sotopia's pins clash with ours, so it cannot share our environment);
``--no-install`` skips sotopia when the venv is missing. ``_sotopia_driver.py`` drives sotopia in that venv.

Both frameworks play the same setups (distinct scenario x characters castings from our library, converted to
sotopia's ``EnvironmentProfile``/``AgentProfile``), 20 turns, round-robin, the same number of episodes in
flight, agents and evaluator through the same loopback OpenAI server (``_loopback_server.py``, its own
process, every reply after ``--latency``; agents always speak, so no episode ends early). Each side stores its
episodes: ours in SQLite, sotopia in its local JSON backend (its Redis backend needs RedisJSON/RediSearch,
which a plain ``redis-server`` lacks; see the driver).

Prompt size is counted from the requests the server received: whitespace-separated words of every message
(the server's own ``usage.prompt_tokens``). Both frameworks resend the whole conversation every turn, so an
agent's prompt grows linearly with the turn and an episode's prompt total quadratically. The token table
says what that costs and what two remedies would save:

- "prefix-reusable": the share of each agent prompt that is a word-for-word prefix of that agent's previous
  prompt in the same episode: what a server with prefix caching (vLLM's automatic prefix caching, SGLang's
  radix cache, hosted prompt caching) would not recompute;
- "history trimmed to last K turns": the prompt total if only the last ``--keep-turns`` turns were sent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import _common
from _common import HERE, LoopbackProcess, distinct_setups, machine_line, print_table
from stores import redis_url

from sotopia_env.episodes.runner import Job
from sotopia_env.episodes.sotopia_format import character_to_sotopia
from sotopia_env.episodes.sqlite_store import SQLiteStore

_ = _common
SOTOPIA_VERSION = "0.1.5"
DEFAULT_VENV = Path.home() / ".cache" / "sotopia-env" / "bench-venv"
TURN_LINE = re.compile(r"^Turn #\d+:", re.M)


# --- the sotopia venv -------------------------------------------------------------------------------------------


def venv_python(venv: Path, install: bool) -> Path | None:
    """The venv's python with sotopia==0.1.5 importable; created and installed on first use if ``install``."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import importlib.metadata as m; print(m.version('sotopia'))"]
    if python.exists():
        found = subprocess.run(check, capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == SOTOPIA_VERSION:
            return python
    if not install:
        return None
    print(f"installing sotopia=={SOTOPIA_VERSION} into {venv} (first run only) ...", flush=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    log = venv.parent / "bench-venv-install.log"
    with open(log, "w") as out:
        done = subprocess.run(
            [str(python), "-m", "pip", "install", f"sotopia=={SOTOPIA_VERSION}"], stdout=out, stderr=subprocess.STDOUT
        )
    if done.returncode != 0:
        tail = log.read_text().strip().splitlines()[-5:]
        raise SystemExit(f"pip install sotopia=={SOTOPIA_VERSION} failed (see {log}):\n" + "\n".join(tail))
    return python


# --- the same setups for both -----------------------------------------------------------------------------------


def sotopia_setup(setup: Any) -> dict[str, Any]:
    """One of our EpisodeSetups as the fields of sotopia's EnvironmentProfile and AgentProfiles."""

    def agent(c: Any) -> dict[str, Any]:
        profile = character_to_sotopia(c)
        summary = f"Big Five: {profile['big_five']}. Moral values: {', '.join(c.moral_values)}. "
        return profile | {"personality_and_values": summary + f"Values: {', '.join(c.schwartz_values)}."}

    relationship = setup.relationship.relationship if setup.relationship is not None else setup.scenario.relationship
    return {
        "codename": setup.scenario.codename,
        "scenario": setup.scenario.scenario,
        "goals": list(setup.scenario.goals),
        "relationship": int(relationship),
        "agents": [agent(c) for c in setup.characters],
    }


# --- the two runs -----------------------------------------------------------------------------------------------


def run_ours(
    srv: LoopbackProcess, setups: list[Any], concurrency: int, turns: int, backend_kind: str = "http"
) -> dict[str, Any]:
    from throughput import timed_batch

    jobs = [Job(setup, ["openai/loopback", "openai/loopback"]) for setup in setups]
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(str(Path(tmp) / "episodes.db"))

        summary, wall, cpu = timed_batch(jobs, store, "vs-sotopia", backend_kind, srv.base_url, concurrency, 0.0, turns)
        saved = store.count(tag="vs-sotopia")
        turns_played = sum(len(log.turns) for log in store.iter("vs-sotopia")) / max(1, saved)
        store.close()
    return {"wall_s": wall, "cpu_s": cpu, "saved": saved, "rated": summary.rated, "turns_per_episode": turns_played}


def run_sotopia(
    python: Path,
    srv: LoopbackProcess,
    setups: list[Any],
    concurrency: int,
    turns: int,
    quiet: bool,
    tmp: Path,
    redis: str | None = None,
) -> dict[str, Any]:
    setups_file, out = tmp / "sotopia-setups.json", tmp / "sotopia-result.json"
    setups_file.write_text(json.dumps([sotopia_setup(s) for s in setups]))
    command = [
        str(python),
        str(HERE / "_sotopia_driver.py"),
        "--setups",
        str(setups_file),
        "--base-url",
        srv.base_url,
        "--concurrency",
        str(concurrency),
        "--turns",
        str(turns),
        "--out",
        str(out),
    ] + (["--quiet"] if quiet else [])
    if redis is not None:
        command += ["--storage", "redis", "--redis-url", redis]
    log = tmp / "sotopia-driver.log"
    start = time.perf_counter()
    env = dict(os.environ, HOME=str(tmp))  # sotopia creates ~/.sotopia/data at import: keep it in the temp dir
    with open(log, "w") as f:
        done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, env=env)
    process_s = time.perf_counter() - start
    if done.returncode != 0:
        tail = "\n".join(log.read_text().strip().splitlines()[-15:])
        raise SystemExit(f"the sotopia driver failed (exit {done.returncode}):\n{tail}")
    result = json.loads(out.read_text())
    result["process_s"] = process_s
    return result


# --- what the server saw ----------------------------------------------------------------------------------------


def words(text: str) -> int:
    return len(text.split())


def classify(messages: list[dict[str, Any]]) -> tuple[str, str]:
    """(kind, key): kind is agent, judge or other; key identifies (episode, agent) for agent prompts."""
    text = "\n".join(str(m.get("content") or "") for m in messages)
    if "You are an impartial judge" in text or "evaluate how well participants achieve their goals" in text:
        return "judge", ""
    ours = re.search(r"You are playing (.+?) in a social simulation", text)
    if ours:  # our system prompt holds the agent's whole background: unique per (setup, seat)
        return "agent", str(messages[0].get("content"))
    theirs = re.search(r"Imagine you are (.+?), your task", text)
    if theirs:
        scenario = re.search(r"Scenario: (.*)", text)
        participants = re.search(r"Participants: (.*)", text)
        return "agent", "|".join(m.group(1) if m else "" for m in (theirs, scenario, participants))
    return "other", ""


def common_prefix_words(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def analyse(requests_file: Path, episodes: int, keep_turns: int) -> dict[str, Any]:
    records = [json.loads(line) for line in requests_file.read_text().splitlines() if line.strip()]
    kinds: dict[str, int] = defaultdict(int)
    prompt_words: dict[str, int] = defaultdict(int)
    previous: dict[str, list[str]] = {}
    per_key: dict[str, list[int]] = defaultdict(list)
    reusable = trimmed = 0
    for record in records:
        messages = record["messages"]
        kind, key = classify(messages)
        kinds[kind] += 1
        flat = "\n".join(f"{m.get('role')}: {m.get('content') or ''}" for m in messages)
        tokens = flat.split()
        prompt_words[kind] += len(tokens)
        if kind != "agent":
            continue
        per_key[key].append(len(tokens))
        if key in previous:
            reusable += common_prefix_words(previous[key], tokens)
        previous[key] = tokens
        turn_lines = [line for line in flat.splitlines() if TURN_LINE.match(line)]
        dropped = turn_lines[: max(0, len(turn_lines) - keep_turns)]
        trimmed += len(tokens) - sum(words(line) for line in dropped)
    agent_words = prompt_words["agent"]
    firsts = [v[0] for v in per_key.values() if v]
    lasts = [v[-1] for v in per_key.values() if v]
    return {
        "requests": len(records),
        "calls_per_episode": len(records) / episodes,
        "agent_calls": kinds["agent"],
        "judge_calls": kinds["judge"],
        "other_calls": kinds["other"],
        "agent_words_per_episode": agent_words / episodes,
        "judge_words_per_episode": prompt_words["judge"] / episodes,
        "all_words_per_episode": sum(prompt_words.values()) / episodes,
        "first_prompt": sum(firsts) / max(1, len(firsts)),
        "last_prompt": sum(lasts) / max(1, len(lasts)),
        "prefix_reusable_pct": 100 * reusable / max(1, agent_words),
        "trimmed_per_episode": trimmed / episodes,
        "trim_saving_pct": 100 * (agent_words - trimmed) / max(1, agent_words),
        "agent_keys": len(per_key),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--concurrency", default="8", help="comma list; each level runs --episodes episodes")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--keep-turns", type=int, default=4, help="K for the trimmed-history estimate")
    parser.add_argument(
        "--our-backend",
        default="http",
        help="comma list: http (OpenAIHTTPBackend, what users get with an --api-base) and/or litellm",
    )
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--no-install", action="store_true", help="skip sotopia if its venv is not ready")
    parser.add_argument("--sotopia-quiet", action="store_true", help="turn sotopia's per-call INFO log off")
    parser.add_argument(
        "--sotopia-redis",
        action="store_true",
        help="store sotopia's episodes in Redis ($REDIS_URL or a local redis-server) instead of its JSON files",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.concurrency, args.turns, args.latency, args.no_install = 2, "2", 4, 0.01, True
    levels = [int(c) for c in args.concurrency.split(",")]
    print(
        f"# sotopia-env vs sotopia {SOTOPIA_VERSION} ({args.episodes} episodes, {args.turns} turns, round-robin, "
        f"{args.latency * 1e3:.0f} ms per LLM call)\n\n{machine_line()}"
    )
    python = venv_python(args.venv, install=not args.no_install)
    if python is None:
        print(f"\nsotopia: skipped (no venv with sotopia=={SOTOPIA_VERSION} at {args.venv}; run without --no-install)")
    setups = distinct_setups(args.episodes)
    runs: list[tuple[str, int, dict[str, Any], dict[str, Any]]] = []
    redis_cm = redis_url() if args.sotopia_redis else contextlib.nullcontext(None)
    with LoopbackProcess(args.latency) as srv, tempfile.TemporaryDirectory() as tmp_name, redis_cm as redis:
        tmp = Path(tmp_name)
        ours = [k.strip() for k in args.our_backend.split(",") if k.strip()]
        for kind in ours:
            run_ours(srv, distinct_setups(2), 2, 2, kind)  # warm-up (imports, first connection) for our side
        for concurrency in levels:
            sides: list[tuple[str, Path | None, str]] = [
                ("sotopia-env" if kind == "http" else f"sotopia-env ({kind} client)", None, kind) for kind in ours
            ]
            if python is not None:
                sides.append((f"sotopia {SOTOPIA_VERSION}", python, ""))
            for name, py, kind in sides:
                srv.reset()
                if py is None:
                    result = run_ours(srv, setups, concurrency, args.turns, kind)
                else:
                    result = run_sotopia(py, srv, setups, concurrency, args.turns, args.sotopia_quiet, tmp, redis)
                    if result.get("first_save_error"):
                        print(f"  sotopia could not store its episodes: {result['first_save_error']}")
                dump = tmp / f"requests-{len(runs)}.jsonl"
                srv.dump(dump)
                runs.append((name, concurrency, result, analyse(dump, args.episodes, args.keep_turns)))
                print(f"  {name} c={concurrency}: {result['wall_s']:.1f} s", flush=True)

    rows = []
    for name, concurrency, result, seen in runs:
        ideal = concurrency * 60 / (seen["calls_per_episode"] * args.latency)
        rate = args.episodes / result["wall_s"] * 60
        saved = result.get("saved")
        rows.append(
            (
                name,
                concurrency,
                args.episodes,
                result["wall_s"],
                rate,
                f"{100 * rate / ideal:.0f}%",
                seen["calls_per_episode"],
                result.get("turns_per_episode", float("nan")),
                seen["all_words_per_episode"],
                result["cpu_s"] / seen["requests"] * 1e3,
                "-" if saved is None else f"{saved}/{args.episodes}",
            )
        )
    print_table(
        "side by side: same setups, same server, same concurrency",
        [
            "framework",
            "concurrency",
            "episodes",
            "wall s",
            "episodes / min",
            "% of latency-bound ideal",
            "LLM calls / episode",
            "turns / episode",
            "prompt tokens / episode",
            "client CPU ms / call",
            "stored",
        ],
        rows,
        note="prompt tokens = whitespace words of every message sent (agents + judge), as the server counts usage. "
        "client CPU = the framework's process (all threads) during the run, per LLM call.",
    )
    token_rows = []
    for name, concurrency, _, seen in runs:
        if concurrency != levels[0] or name.startswith("sotopia-env ("):  # same prompts as the first row
            continue
        token_rows.append(
            (
                name,
                seen["agent_words_per_episode"],
                seen["judge_words_per_episode"],
                seen["first_prompt"],
                seen["last_prompt"],
                f"{seen['prefix_reusable_pct']:.0f}%",
                seen["trimmed_per_episode"],
                f"{seen['trim_saving_pct']:.0f}%",
            )
        )
    print_table(
        "prompt tokens: growth with the conversation, and what caching or trimming would save",
        [
            "framework",
            "agent prompt tokens / episode",
            "judge prompt tokens / episode",
            "first agent prompt",
            "last agent prompt",
            "prefix-reusable (prefix cache)",
            f"agent tokens / episode, history trimmed to last {args.keep_turns} turns",
            "trim saving",
        ],
        token_rows,
        note="prefix-reusable: share of agent prompt tokens that repeat the same agent's previous prompt as a prefix.",
    )


if __name__ == "__main__":
    main()
