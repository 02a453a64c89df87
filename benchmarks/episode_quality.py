"""Does the default ``sotopia-env run`` episode read as a conversation, about its scenario? Figures over
scenarios and seeds.

    python benchmarks/episode_quality.py                  # 5 dev scenarios x seeds 0..3 at once, run's defaults
    python benchmarks/episode_quality.py --prompt sotopia # the same episodes under SOTOPIA's prompt
    python benchmarks/episode_quality.py --no-topic-bias  # the same episodes without the nudge to topic words
    python benchmarks/episode_quality.py --scenarios random --seeds 0 1 2   # scenario sampled by the seed
    python benchmarks/episode_quality.py --one-by-one     # each episode a `sotopia-env run` through the CLI
    python benchmarks/episode_quality.py --scenarios exchange-babysitting-meals --seeds 0 --max-turns 8 --show
    python benchmarks/episode_quality.py --quick          # 1 scenario, 2 seeds, 4 turns (the smoke test)

By default the episodes are played at once in one process, as ``sotopia-env run --scenario S --seed N``
builds each (the scenario's characters sampled by the seed, or, with ``--scenarios random``, the scenario
too; both agents with ``run``'s generation settings and the embedded model's own prompt, ``chat``; the env
seeded by N), so the embedded model's calls share batches (about 4x faster on a CPU). Turns come out as ``run``'s: left
padding does not change greedy ones, and each sampled retry draws with its own request's seed.
``--one-by-one`` instead invokes ``sotopia-env run --seed N`` in process through the CLI itself. Either way
the judge is skipped (``--evaluator none``: the figures are about the conversation) and the episodes go to a
throwaway SQLite store, from which the turns are read back. ``--show`` prints each transcript as ``run`` does.

Per episode set, over speech turns (``speak``), the measures of ``talk_figures`` (``tests/test_prompt.py``
checks a real episode with them):

- on topic: the share that share a content word (``sotopia_env.topic.content_words``: 4 letters or more, not
  one of the ``stop-words`` package's English stop words) with the scenario's text or the speaker's own goal, words
  compared by their Snowball stem (``snowballstemmer``: "cooking" shares "cook", "meals" shares "meal"). The
  partner's words do not count: two seats that talk about answering echo each other. "On topic, same form"
  compares the words as written (the stricter figure). These are the words ``run``'s chat settings nudge the
  model toward (``topic_bias``), so ``--no-topic-bias`` plays the same episodes without the nudge: the control;
- example copies: the share that are the chat prompt's example line word for word (``CHAT_EXAMPLE``, an
  opening on the scenario's topic): on topic by construction, so shown apart;
- meta-talk: the share that talk about answering itself (``META_TALK``: "respond", "reply", "how to
  answer", "I will speak", "your turn", ...);
- distinct openings: the share whose first three words (lower case) open no earlier speech turn of the
  episode.

And, over all turns:

- turns: the median number of turns (one action each);
- empty: the share of speak / non-verbal turns whose argument is empty, ``...`` or only punctuation/whitespace;
- repeats: the share of turns with a non-blank argument equal (after stripping) to an earlier turn's in the
  same episode;
- repeated openings: the share of turns with three or more words whose first three words already opened an
  earlier turn of the same episode (either agent's; "I am not clear ..." after "I am not sure ...");
- early leave: episodes that end by ``leave`` on one of the first four turns (``#0`` to ``#3``).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import string
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any

import _common
from _common import machine_line, print_table

from sotopia_env import topic
from sotopia_env.actions import ActionType
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.prompt import CHAT_EXAMPLE

_ = _common
TALK = (ActionType.speak, ActionType.non_verbal)
EARLY = 4
CODES = {ActionType.speak: "S", ActionType.non_verbal: "N", ActionType.action: "A", ActionType.leave: "L"}
CODES[ActionType.none] = "-"
# Five dev-split scenarios of five kinds, two seats each (the issue's own episode first).
SCENARIOS = [
    "exchange-babysitting-meals",
    "collaboration-demo-bug",
    "persuasion-quit-smoking",
    "conflict-inherited-cabin",
    "negotiation-summer-sublet",
]
META_TALK = re.compile(
    r"\b(?:respon(?:d|ds|ded|ding|se|ses)|repl(?:y|ies|ied|ying)|how to (?:answer|respond|reply|react|speak)"
    r"|i will speak|what to say|(?:my|your) (?:turn|move))\b",
    re.IGNORECASE,
)


@cache
def stemmer() -> Any:
    import snowballstemmer

    return snowballstemmer.stemmer("english")


def content_words(text: str, stem: bool = False) -> set[str]:
    """``sotopia_env.topic.content_words`` (the words the chat settings nudge toward); with ``stem``, their
    Snowball stems (``cooking`` and ``cook`` are one word)."""
    words = topic.content_words(text)
    return set(stemmer().stemWords(sorted(words))) if stem else words


def is_on_topic(argument: str, scenario: str, goal: str, stem: bool = True) -> bool:
    """Whether a speech turn shares a content word (by stem, unless ``stem`` is off: then in the same form)
    with the scenario's text or the speaker's own goal."""
    return bool(content_words(argument, stem) & (content_words(scenario, stem) | content_words(goal, stem)))


def is_meta_talk(argument: str) -> bool:
    return META_TALK.search(argument) is not None


def talk_figures(logs: list[EpisodeLog]) -> dict[str, float]:
    """On topic (by stem, and in the same form), meta-talk, distinct openings and copies of the chat prompt's
    example line over the speech turns of ``logs`` (NaN when there are none)."""
    on_topic = same_form = meta = distinct = copies = spoken = 0
    for log in logs:
        goals = dict(zip(log.setup.agent_names, log.setup.scenario.goals, strict=True))
        opened: set[tuple[str, ...]] = set()
        for t in log.turns:
            if t.action.action_type is not ActionType.speak:
                continue
            spoken += 1
            said, scenario, goal = t.action.argument, log.setup.scenario.scenario, goals.get(t.agent, "")
            on_topic += is_on_topic(said, scenario, goal)
            same_form += is_on_topic(said, scenario, goal, stem=False)
            copies += said.strip() == CHAT_EXAMPLE.format(topic=log.setup.scenario.topic)
            meta += is_meta_talk(t.action.argument)
            opening = tuple(t.action.argument.lower().split()[:3])
            distinct += opening not in opened
            opened.add(opening)
    nan = float("nan")
    return {
        "speech turns": spoken,
        "on topic": on_topic / spoken if spoken else nan,
        "on topic, same form": same_form / spoken if spoken else nan,
        "example copies": copies / spoken if spoken else nan,
        "meta-talk": meta / spoken if spoken else nan,
        "distinct openings": distinct / spoken if spoken else nan,
    }


def is_empty(argument: str) -> bool:
    return not argument.strip(string.punctuation + string.whitespace + "…")


Episode = tuple[str | None, int]  # (scenario id, or None: sampled by the seed; seed)


def run_episode(episode: Episode, max_turns: int | None, store_url: str, show: bool) -> EpisodeLog:
    from typer.testing import CliRunner

    from sotopia_env.cli.main import app
    from sotopia_env.episodes.store import open_store

    scenario, seed = episode
    tag = f"{scenario}-{seed}"
    args = ["run", "--seed", str(seed), "--evaluator", "none", "--store", store_url, "--tag", tag]
    args += ["--scenario", scenario] if scenario else []
    if max_turns is not None:
        args += ["--max-turns", str(max_turns)]
    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        raise SystemExit(f"sotopia-env {' '.join(args)} failed ({result.exit_code}): {result.output[-500:]}")
    if show:
        print(result.output)
    (log,) = open_store(store_url).iter(tag)
    return log


def run_episodes_at_once(
    episodes: list[Episode], max_turns: int | None, store_url: str, prompt: str | None = None, topic_bias: bool = True
) -> list[EpisodeLog]:
    """Each episode as ``run`` builds it, all played concurrently on the shared embedded backend; ``prompt``
    overrides the model's own; without ``topic_bias`` the agents are not nudged toward their topic words."""
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.cli.run_cmd import CHAT_SETTINGS, DEFAULT_MODEL
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.runner import Job, run_episode
    from sotopia_env.episodes.store import open_store
    from sotopia_env.episodes.store_writer import StoreWriter
    from sotopia_env.library import load_library
    from sotopia_env.sampler import sample_setup

    library = load_library()
    config = EnvConfig() if max_turns is None else EnvConfig(max_turns=max_turns)  # run's default: 20, as EnvConfig's
    writer = StoreWriter(open_store(store_url), "quality", 60.0)

    async def one(scenario: str | None, seed: int) -> EpisodeLog:
        settings = GenerationSettings(seed=seed, **{**CHAT_SETTINGS, **({} if topic_bias else {"topic_bias": 0.0})})
        agents = [load_agent(DEFAULT_MODEL, settings=settings, prompt=prompt) for _ in range(2)]
        job = Job(sample_setup(library, seed=seed, scenario=scenario), [DEFAULT_MODEL] * 2, seed=seed)
        return await run_episode(job, None, writer, agents=agents, tag="quality", config=config)

    async def all_episodes() -> list[EpisodeLog]:
        return list(await asyncio.gather(*(one(scenario, seed) for scenario, seed in episodes)))

    return asyncio.run(all_episodes())


def figures(logs: list[EpisodeLog]) -> dict[str, float | int]:
    talk = [t for log in logs for t in log.turns if t.action.action_type in TALK]
    repeats = spoken = 0
    for log in logs:
        seen: set[str] = set()
        for t in log.turns:
            text = t.action.argument.strip()
            if not text:
                continue
            spoken += 1
            repeats += text in seen
            seen.add(text)
    reopened = worded = 0
    for log in logs:
        opened: set[tuple[str, ...]] = set()
        for t in log.turns:
            words = tuple(t.action.argument.split()[:3])
            if len(words) < 3:
                continue
            worded += 1
            reopened += words in opened
            opened.add(words)
    early = sum(
        1
        for log in logs
        if log.turns and log.turns[-1].action.action_type is ActionType.leave and log.turns[-1].turn < EARLY
    )
    return {
        "median turns": statistics.median(len(log.turns) for log in logs),
        "empty": sum(is_empty(t.action.argument) for t in talk) / len(talk) if talk else float("nan"),
        "repeats": repeats / spoken if spoken else float("nan"),
        "openings": reopened / worded if worded else float("nan"),
        "early leaves": early,
    }


def transcript(log: EpisodeLog) -> str:
    from sotopia_env.transcript import render_transcript

    return f"== {log.setup.scenario.id}, seed {log.seed} ({log.termination_reason})\n{render_transcript(log.turns)}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", nargs="+", default=SCENARIOS, help="Scenario ids, or 'random' (by seed).")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(4)))
    parser.add_argument("--max-turns", type=int, default=None, help="Pass --max-turns to run (default: run's).")
    parser.add_argument("--prompt", default=None, help="Prompt the agents so (default: the model's own, as run).")
    parser.add_argument("--no-topic-bias", action="store_true", help="Control: no nudge toward topic words.")
    parser.add_argument("--show", action="store_true", help="Print each episode's transcript.")
    parser.add_argument("--label", default="", help="A label for the table's row (e.g. before / after).")
    parser.add_argument("--quick", action="store_true", help="1 scenario, 2 seeds of 4 turns (smoke test).")
    parser.add_argument("--one-by-one", action="store_true", help="Each episode a `sotopia-env run` via the CLI.")
    parser.add_argument(
        "--no-opening-guard", action="store_true", help="Ablation: let a turn open as an earlier one did."
    )
    args = parser.parse_args()
    if args.one_by_one and (args.prompt or args.no_topic_bias):
        parser.error("--prompt and --no-topic-bias are for episodes played at once (run has neither)")
    if args.no_opening_guard:
        from sotopia_env.backends import local

        local.openings = lambda texts: []  # the guard's input: no openings to avoid
    if args.quick:
        args.scenarios, args.seeds, args.max_turns = args.scenarios[:1], args.seeds[:2], 4
    scenarios = [None if s == "random" else s for s in args.scenarios]
    episodes = [(scenario, seed) for scenario in scenarios for seed in args.seeds]
    print(machine_line())
    logs: list[EpisodeLog] = []
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'quality.db'}"
        if not args.one_by_one:
            logs = run_episodes_at_once(episodes, args.max_turns, url, args.prompt, not args.no_topic_bias)
        for k, episode in enumerate(episodes):
            t0 = time.perf_counter()
            log = run_episode(episode, args.max_turns, url, args.show) if args.one_by_one else logs[k]
            if args.one_by_one:
                logs.append(log)
            elif args.show:
                print(transcript(log))
            one, talk = figures([log]), talk_figures([log])
            kinds = "".join(CODES[t.action.action_type] for t in log.turns)
            rows.append(
                [log.setup.scenario.id, episode[1], len(log.turns), log.termination_reason]
                + [talk["on topic"], talk["meta-talk"], talk["distinct openings"], one["empty"], one["repeats"]]
                + [kinds, time.perf_counter() - t0 if args.one_by_one else "-"]
            )
            print(f"{rows[-1]}", flush=True)
    print_table(
        "Per episode",
        ["scenario", "seed", "turns", "ended", "on topic", "meta-talk", "distinct openings", "empty", "repeats"]
        + ["actions", "seconds"],
        rows,
        note="Shares of speech turns (on topic, meta-talk, distinct openings) and of all turns (empty, repeats); "
        "actions: S speak, N non-verbal, A action, L leave, - none.",
    )
    total, talk = figures(logs), talk_figures(logs)
    prompts = sorted({p for log in logs for p in (log.protocol.prompts if log.protocol else None) or []})
    seeds = f"seeds {args.seeds[0]}..{args.seeds[-1]}" if len(args.seeds) > 1 else f"seed {args.seeds[0]}"
    max_turns = args.max_turns or "as run's default"
    print_table(
        "Episode quality",
        ["code", "prompt", "episodes", "speech turns", "on topic", "on topic, same form", "example copies"]
        + ["meta-talk", "distinct openings", "median turns", "empty speak/non-verbal", "verbatim repeats"]
        + ["repeated openings", "early leaves (< #4)"],
        [
            [args.label or "-", ", ".join(prompts) or "-", len(logs), talk["speech turns"]]
            + [f"{talk[k]:.0%}" for k in ("on topic", "on topic, same form", "example copies")]
            + [f"{talk[k]:.0%}" for k in ("meta-talk", "distinct openings")]
            + [total["median turns"], f"{total['empty']:.0%}", f"{total['repeats']:.0%}"]
            + [f"{total['openings']:.0%}", f"{total['early leaves']} of {len(logs)}"]
        ],
        note=f"{len(scenarios)} scenarios x {seeds}, max turns {max_turns}, judge skipped; "
        f"{time.perf_counter() - started:.0f} s in all. Targets: on topic >= 80%, meta-talk <= 5%.",
    )


if __name__ == "__main__":
    main()
