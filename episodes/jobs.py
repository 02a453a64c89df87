"""Batches of jobs: self-play, and a model against a fixed partner in both seats (``sotopia-env benchmark``)."""

from __future__ import annotations

from collections.abc import Sequence

from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.episodes.runner import Job
from sotopia_env.library import Library
from sotopia_env.profiles import Scenario
from sotopia_env.sampler import sample_setups


def setups_per_scenario(
    scenarios: Sequence[Scenario], library: Library, n: int, seed: int = 0
) -> list[tuple[EpisodeSetup, int]]:
    """``n`` (setup, repeat) pairs per scenario: distinct character pairings first, then repeats of them."""
    out: list[tuple[EpisodeSetup, int]] = []
    for scenario in scenarios:
        distinct = sample_setups([scenario], library, n, seed=seed)
        out.extend((distinct[i % len(distinct)], i // len(distinct)) for i in range(n))
    return out


def self_play_jobs(scenarios: Sequence[Scenario], library: Library, spec: str, n: int, seed: int = 0) -> list[Job]:
    """``spec`` in every seat, ``n`` episodes per scenario."""
    return [
        Job(setup, [spec] * setup.scenario.num_agents, repeat)
        for setup, repeat in setups_per_scenario(scenarios, library, n, seed)
    ]


def versus_jobs(
    scenarios: Sequence[Scenario], library: Library, model: str, partner: str, n: int, seed: int = 0
) -> list[Job]:
    """Each sampled setup once per seat: ``model`` in that seat, ``partner`` in every other (once if model ==
    partner). With two seats: ``model`` in seat 1, then in seat 2.

    A verifiable scenario once: ``model`` in seat 1, the learner's seat (seat 2 is the rule partner's)."""
    return setup_versus_jobs(sample_setups(scenarios, library, n, seed=seed), model, partner)


def benchmark_jobs(
    library: Library, selector: str, model: str, partner: str, evaluator: str, n: int, seed: int = 0
) -> tuple[list[Scenario], list[Job]]:
    """What ``benchmark`` plays (the CLI's and the server's ``POST /api/benchmarks``): the scenarios ``selector``
    picks, checked against the rule agents and judge (``check_rule_specs``), and their ``versus_jobs``. Raises
    ``ValueError`` (a ``LibraryError``, ``AgentSpecError``...) with one line when there is nothing to play."""
    from sotopia_env.agents.rule_specs import check_rule_specs

    chosen = library.select(selector)
    if not chosen:
        raise ValueError(f"--scenarios {selector!r} selects no scenario")
    check_rule_specs(chosen, [model, partner], evaluator)
    return chosen, versus_jobs(chosen, library, model, partner, n, seed)


def setup_versus_jobs(setups: Sequence[EpisodeSetup], model: str, partner: str) -> list[Job]:
    """``versus_jobs`` on given setups (``benchmark --protocol``: the pairings a SOTOPIA import fixed)."""
    jobs: dict[str, Job] = {}
    for setup in setups:
        seats = setup.scenario.num_agents
        orders = (
            [[model, partner]]
            if setup.scenario.verifiable
            else [[partner] * k + [model] + [partner] * (seats - k - 1) for k in range(seats)]
        )
        for specs in orders:
            job = Job(setup, specs)
            jobs.setdefault(job.key, job)
    return list(jobs.values())
