import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import batch_worker

from sotopia_env.agents.scripted import ScriptedAgent
from sotopia_env.episodes.runner import run_batch
from sotopia_env.episodes.store import open_store
from sotopia_env.evaluators import EpisodeRating, RuleBasedEvaluator


class FlakyEvaluator(RuleBasedEvaluator):
    """Fails to rate episodes of the scenarios in ``bad``."""

    def __init__(self, bad: set[str]) -> None:
        super().__init__()
        self.bad = bad

    async def aevaluate(self, context) -> EpisodeRating:
        if context.setup.scenario.id in self.bad:
            return EpisodeRating(evaluator=self.name, error="judge timed out")
        return await super().aevaluate(context)


def scripted_factory(explode_on: str | None = None):
    def make(spec, seat):
        if explode_on and spec == explode_on:
            raise RuntimeError("could not load model")
        return ScriptedAgent([f"{spec} says hi", "and bye"])

    return make


def test_batch_survives_failures_and_resumes(tmp_path):
    store = open_store(str(tmp_path / "eps.db"))
    jobs = batch_worker.jobs(4)
    jobs[1].agent_specs = ["broken", "fine"]
    first, third = jobs[0].setup.scenario.id, jobs[2].setup.scenario.id
    summary = asyncio.run(
        run_batch(jobs, store, "t", FlakyEvaluator({third}), scripted_factory("broken"), progress=False)
    )
    assert (summary.rated, summary.unrated, summary.failed, summary.skipped) == (2, 1, 1, 0)
    failed = store.query(tag="t", status="failed")[0]
    assert "could not load model" in failed.error
    unrated = store.query(tag="t", status="unrated")[0]
    assert unrated.rating.error == "judge timed out" and unrated.scenario_id == third
    assert store.query(tag="t", scenario=first)[0].status == "rated"

    again = asyncio.run(run_batch(jobs, store, "t", RuleBasedEvaluator(), scripted_factory(), progress=False))
    assert again.skipped == 4 and again.rated == 0

    redo = asyncio.run(
        run_batch(jobs, store, "t", RuleBasedEvaluator(), scripted_factory(), rerun_failed=True, progress=False)
    )
    assert redo.skipped == 2 and redo.rated == 2
    assert store.count(tag="t") == 4 and store.count(tag="t", status="rated") == 4
    assert store.get(failed.id).status == "rated"  # replaced in place, same id


def test_accounting_is_recorded(tmp_path):
    store = open_store(str(tmp_path / "eps.db"))
    asyncio.run(
        run_batch(batch_worker.jobs(1), store, "acc", RuleBasedEvaluator(), batch_worker.factory(0), progress=False)
    )
    (log,) = store.query(tag="acc")
    name = log.agents[0].name
    assert log.usage[name].calls == 4 and log.usage[name].prompt_tokens > 0
    assert log.wall_seconds > 0 and log.status == "rated"


def test_sigkill_midway_then_resume_loses_and_duplicates_nothing(tmp_path):
    db = tmp_path / "kill.db"
    n = 10
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "batch_worker.py"), str(db), str(n), "0.15"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 120
    stored = 0
    while time.time() < deadline:
        if db.exists():
            stored = open_store(str(db)).count(tag=batch_worker.TAG)
            if stored >= 3:
                break
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = open_store(str(db))
    before = {log.id: log for log in store.iter(batch_worker.TAG)}
    assert 3 <= len(before) < n, "the kill should land midway"

    out = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "batch_worker.py"), str(db), str(n), "0"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    after = list(store.iter(batch_worker.TAG))
    assert result["skipped"] == len(before)
    assert len(after) == n
    assert Counter(log.combo_key for log in after).most_common(1)[0][1] == 1  # no duplicates
    for log in after:  # nothing finished before the kill was lost or changed
        if log.id in before:
            assert log == before[log.id]


def test_rate_stored_rerates_unrated_and_keeps_failures_honest(tmp_path):
    from sotopia_env.episodes.rate import rate_stored

    class Exploding(RuleBasedEvaluator):
        async def aevaluate(self, context):
            raise RuntimeError("judge crashed")

    store = open_store(str(tmp_path / "eps.db"))
    jobs = batch_worker.jobs(2)
    asyncio.run(
        run_batch(
            jobs, store, "r", FlakyEvaluator({j.setup.scenario.id for j in jobs}), scripted_factory(), progress=False
        )
    )
    assert store.count(tag="r", status="unrated") == 2
    assert asyncio.run(rate_stored(store, Exploding(), tag="r")) == {"rated": 0, "unrated": 2, "failed": 0}
    assert all("judge crashed" in log.rating.error for log in store.query(tag="r"))
    assert asyncio.run(rate_stored(store, RuleBasedEvaluator(), tag="r")) == {"rated": 2, "unrated": 0, "failed": 0}
    assert store.count(tag="r", status="rated") == 2 and store.count(tag="r") == 2


def test_run_episode_stores_into_a_store_it_is_handed(tmp_path):
    from sotopia_env import open_store as front_door_open_store
    from sotopia_env import run_episode

    store = front_door_open_store(str(tmp_path / "one.db"))
    (job,) = batch_worker.jobs(1)
    log = asyncio.run(run_episode(job, RuleBasedEvaluator(), store, agents=scripted_factory(), tag="one"))
    assert log is not None and log.status == "rated" and log.tag == "one"
    assert store.get(log.id).turns == log.turns and store.count(tag="one") == 1
