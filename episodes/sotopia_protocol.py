"""SOTOPIA's published evaluation protocol (``benchmark --protocol sotopia-hard|sotopia-all``).

SOTOPIA evaluates a model on its 90 scenarios (``sotopia-all``) or on the 14 hard ones (``sotopia-hard``), with 5
character pairs per scenario, the model in each seat against a partner, at most 20 turns, round-robin, rated on
the seven SOTOPIA-EVAL dimensions. Every model is prompted with SOTOPIA's prompt (``sotopia_env.prompt``),
whatever prompt it would get elsewhere. The two id lists ship as package data (``data/sotopia_env_ids.txt``: a verbatim
copy of ``data/env_ids.txt`` in github.com/sotopia-lab/sotopia-rl at commit 2ebb14e); nothing is fetched at run
time.

The scenarios and characters are SOTOPIA's own, so they are not in the built-in library: they come from SOTOPIA
episodes imported into the store (``sotopia-env episodes import PATH --format sotopia``, which converts them
with ``episodes.sotopia_format``). ``protocol_setups`` takes, for each scenario of the protocol, the 5 character
pairings the stored episodes of that scenario were played in most often (SOTOPIA's fixed environment-agent
combinations, in a full import), ties broken by the pairing's key, each with its characters and relationship as
first stored.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.sotopia_format import local_id
from sotopia_env.episodes.store import EpisodeStore
from sotopia_env.errors import UserError
from sotopia_env.prompt import SOTOPIA

IDS_FILE = "sotopia_env_ids.txt"
SECTIONS = {"SOTOPIA-HARD": "sotopia-hard", "SOTOPIA-ALL": "sotopia-all"}
IMPORT_HINT = "import SOTOPIA's episodes first: sotopia-env episodes import PATH --format sotopia"


class ProtocolNotImported(UserError, ValueError):
    """The store lacks the SOTOPIA scenarios or character pairings a protocol needs (one line)."""


@dataclass(frozen=True)
class SotopiaProtocol:
    name: str
    scenario_ids: tuple[str, ...]  # our ids of SOTOPIA's environment pks (``sotopia_format.local_id``)
    pairings: int = 5
    max_turns: int = 20
    action_order: str = "round-robin"
    dimensions: str = "sotopia"
    prompt: str = SOTOPIA


def parse_env_ids(text: str) -> dict[str, tuple[str, ...]]:
    """sotopia-rl's ``env_ids.txt``: a ``NAME:`` line, then that set's quoted ids; ours are lower case."""
    out: dict[str, tuple[str, ...]] = {}
    name = None
    for line in text.splitlines():
        header = re.fullmatch(r"\s*([A-Z][A-Z-]*):\s*", line)
        if header:
            name = header.group(1)
            continue
        if name is not None:
            out[name] = out.get(name, ()) + tuple(local_id(pk, pk) for pk in re.findall(r'"([^"]+)"', line))
    return out


@lru_cache(maxsize=1)
def protocols() -> dict[str, SotopiaProtocol]:
    text = (resources.files("sotopia_env.episodes") / "data" / IDS_FILE).read_text(encoding="utf-8")
    sets = parse_env_ids(text)
    return {name: SotopiaProtocol(name, sets[section]) for section, name in SECTIONS.items()}


def protocol_named(scenario_ids: list[str]) -> str | None:
    """The protocol whose scenario set ``scenario_ids`` is, if any (for a card's label)."""
    wanted = set(scenario_ids)
    return next((p.name for p in protocols().values() if set(p.scenario_ids) == wanted), None)


def get_protocol(name: str) -> SotopiaProtocol:
    known = protocols()
    if name not in known:
        raise ProtocolNotImported(f"--protocol {name!r}: expected {' or '.join(known)}")
    return known[name]


def protocol_setups(store: EpisodeStore, protocol: SotopiaProtocol) -> list[EpisodeSetup]:
    """``protocol.pairings`` setups per scenario, from the SOTOPIA episodes in ``store`` (module docstring);
    ``ProtocolNotImported`` naming what is missing and how to import it."""
    missing: list[str] = []
    short: list[str] = []
    setups: list[EpisodeSetup] = []
    for sid in protocol.scenario_ids:
        counts: Counter[str] = Counter()
        first: dict[str, EpisodeSetup] = {}
        for log in store.query(scenario=sid):
            key = log.setup.pairing_key
            counts[key] += 1
            first.setdefault(key, log.setup)
        if not counts:
            missing.append(sid)
            continue
        chosen = sorted(counts, key=lambda k: (-counts[k], k))[: protocol.pairings]
        if len(chosen) < protocol.pairings:
            short.append(f"{sid} ({len(chosen)})")
        setups.extend(first[k] for k in chosen)
    where = f"--protocol {protocol.name}"
    if missing:
        raise ProtocolNotImported(
            f"{where}: {len(missing)} of its {len(protocol.scenario_ids)} SOTOPIA scenarios (e.g. {missing[0]}) have "
            f"no episodes in {store.url}; {IMPORT_HINT}"
        )
    if short:
        raise ProtocolNotImported(
            f"{where}: {len(short)} scenarios have fewer than {protocol.pairings} character pairings in {store.url} "
            f"(e.g. {short[0]}); {IMPORT_HINT}"
        )
    return setups
