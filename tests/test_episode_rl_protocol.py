"""The statistics and guards behind ``benchmarks/episode_rl.py``'s claims: the nested paired bootstrap (training
seeds resampled, then instances within each seed) and the seed-level t-interval beside it, the row grammar, and the
rule that test runs once, fully specified (settings, seeds, rows, commit), and prints when every seed is in."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import _stages  # noqa: E402
import episode_rl  # noqa: E402


def cells_for(effect: float, seed_sd: float, noise_sd: float, rng, seeds=3, instances=36) -> tuple[dict, dict]:
    """A row and its reference, per training seed and instance: the row is the reference plus ``effect``, a
    per-seed shift (training noise) and per-cell noise."""
    reference, mine = {}, {}
    base = rng.normal(5, 2, instances)
    for s in range(seeds):
        shift = rng.normal(0, seed_sd)
        reference[s] = {f"i{i}": float(base[i] + rng.normal(0, noise_sd)) for i in range(instances)}
        mine[s] = {f"i{i}": float(base[i] + effect + shift + rng.normal(0, noise_sd)) for i in range(instances)}
    return mine, reference


def test_the_interval_holds_a_known_effect_and_covers_zero_without_one():
    rng = np.random.default_rng(1)
    mine, reference = cells_for(1.0, 0.1, 0.5, rng)
    mean, low, high, n_seeds, n_instances = _stages.nested_interval(mine, reference, resamples=1000)
    assert (n_seeds, n_instances) == (3, 36)
    assert low < 1.0 < high and low > 0
    t_mean, t_low, t_high, _, _ = _stages.seed_t_interval(mine, reference)
    assert t_mean == pytest.approx(mean) and t_low < 1.0 < t_high
    mine, reference = cells_for(0.0, 0.1, 0.5, rng)
    _, low, high, _, _ = _stages.nested_interval(mine, reference, resamples=1000)
    assert low < 0 < high


def test_seed_to_seed_noise_widens_the_interval():
    """Resampling training seeds is what makes one lucky seed unable to carry a claim: the same cells with a
    large per-seed spread give a wider interval than with none."""
    narrow = _stages.nested_interval(*cells_for(1.0, 0.0, 0.5, np.random.default_rng(2)), resamples=1000)
    wide = _stages.nested_interval(*cells_for(1.0, 1.5, 0.5, np.random.default_rng(2)), resamples=1000)
    assert wide[2] - wide[1] > 2 * (narrow[2] - narrow[1])


def coverage(seeds: int, instances: int, seed_sd: float, draws: int = 300) -> tuple[float, float]:
    """The share of ``draws`` simulated datasets (a planted effect of 1, a per-training-seed shift of sd
    ``seed_sd``, per-cell noise of sd 1) whose nested bootstrap (500 resamples) and seed t-interval cover 1."""
    rng = np.random.default_rng(7)
    nested = t = 0
    for _ in range(draws):
        mine, reference = cells_for(1.0, seed_sd, 1.0, rng, seeds, instances)
        _, low, high, _, _ = _stages.nested_interval(mine, reference, resamples=500, seed=int(rng.integers(1 << 30)))
        nested += low <= 1.0 <= high
        _, low, high, _, _ = _stages.seed_t_interval(mine, reference)
        t += low <= 1.0 <= high
    return nested / draws, t / draws


def test_the_nested_bootstrap_covers_a_planted_seed_effect_at_its_nominal_rate():
    """300 simulated datasets whose training seeds shift the effect (sd 1, as large as the per-cell noise), 12
    seeds: the nested bootstrap covers the planted effect in 95% of them (within 3 binomial sds: 0.91-0.99). A
    resampler without the seed level, or one that resamples one instance set for every seed, covers far less."""
    nested, t = coverage(seeds=12, instances=8, seed_sd=1.0)
    assert 0.91 <= nested <= 0.99, nested
    assert 0.91 <= t <= 0.99, t


def test_with_three_seeds_the_t_interval_holds_its_level_and_the_bootstrap_does_not():
    """Why the table prints a seed-level t-interval beside the bootstrap: with 3 training seeds there are 10
    distinct seed draws and no draw leaves the seeds' range, so the bootstrap covers a planted seed effect in
    ~80% of datasets, not 95%; the t-interval (2 degrees of freedom) stays at its nominal rate."""
    nested, t = coverage(seeds=3, instances=12, seed_sd=1.0)
    assert 0.91 <= t <= 0.99, t
    assert nested < 0.88, nested


def test_one_seed_has_no_seed_interval():
    mine, reference = cells_for(1.0, 0.5, 0.5, np.random.default_rng(4), seeds=1)
    mean, low, high, n_seeds, _ = _stages.seed_t_interval(mine, reference)
    assert n_seeds == 1 and mean == mean and low != low and high != high
    assert _stages.fmt_diff(_stages.both_intervals(mine, reference, resamples=200)).count("t - (1x36)") == 1


def test_a_reference_without_seeds_pairs_with_every_seed():
    mine = {0: {"a": 3.0, "b": 4.0}, 1: {"a": 5.0, "b": 6.0}}
    base = {None: {"a": 1.0, "b": 2.0}}
    mean, low, high, n_seeds, n_instances = _stages.nested_interval(mine, base, resamples=200)
    assert mean == pytest.approx(3.0) and (n_seeds, n_instances) == (2, 2)
    assert 2.0 <= low <= high <= 4.0
    assert _stages.seed_t_interval(mine, base)[0] == pytest.approx(3.0)


def test_rows_parse_with_overrides_and_temperature():
    row = episode_rl.Row.parse("grpo[learning_rate=1e-4,shuffle_rewards=true]@0.3")
    assert row.name == "grpo" and row.temperature == 0.3 and row.start == "bc"
    assert dict(row.overrides) == {"learning_rate": 1e-4, "shuffle_rewards": True}
    assert row.stage == "grpo[learning_rate=1e-4,shuffle_rewards=true]"
    assert episode_rl.Row.parse("sr-grpo").start == "sr"
    with pytest.raises(SystemExit, match="overrides are for the GRPO rows"):
        episode_rl.Row.parse("bc[learning_rate=1]")
    with pytest.raises(SystemExit, match="NAME"):
        episode_rl.Row.parse("ppo")


def test_the_baselines_are_rows_played_on_the_rows_instances_and_seeds(tmp_path):
    """``random``, ``heuristic`` and ``oracle`` are untrained rows (one evaluation, no training seed), played on the
    same starts, seeds and turn limit as every row, so the table shows them beside each learned row."""
    args = episode_args(k=2, kinds="bargaining", batch=8, max_turns=10)
    goals = {}
    for name in ("random", "heuristic", "oracle"):
        row = episode_rl.Row.parse(name)
        assert row.start is None and name not in episode_rl.TRAINED
        records = episode_rl.evaluate(lambda name=name: f"baseline-{name}", row, "dev", args, [])
        assert {r["kind"] for r in records} == {"bargaining"} and len(records) == 4 * 3  # 4 instances x (1 + k)
        assert {r["seed"] for r in records} == {0, 1, 2}
        goals[name] = np.mean([r["goal"] for r in records])
    assert goals["oracle"] == 10 and goals["random"] < goals["heuristic"] < goals["oracle"]
    assert ("grpo", "heuristic") in episode_rl.CONTRASTS


def episode_args(**kw) -> argparse.Namespace:
    """``episode_rl.py``'s arguments at their defaults (those the guard keeps), ``kw`` changed."""
    settings = dict(
        steps=10, lr=2e-4, iterations=2, beta=0.1, bc_epochs=3.0, bc_lr=1e-3, sr_samples=2, max_turns=6,
        max_new_tokens=40, temperature=0.7, train_scenarios="verifiable:train", k=8, eval_seed=0, final=True,
        seeds=[0, 1, 2],
    )  # fmt: skip
    return argparse.Namespace(**{**settings, **kw})


def test_test_runs_once_under_one_set_of_settings_seeds_rows_and_commit(tmp_path, monkeypatch):
    """The guard keeps the settings, the training seeds, the row set and the code commit before a test run plays;
    a run with other settings, other seeds or a part of the rows is refused, one at another commit may only
    reprint (it gets a reason, and a caller plays nothing), and a first test run needs a clean checkout."""
    monkeypatch.setattr(_stages, "code_commit", lambda: "abc123")
    args = episode_args()
    rows = [episode_rl.Row.parse(r) for r in ("bc", "grpo")]
    episode_rl.Run(tmp_path, args).guard_test(rows)
    kept = json.loads((tmp_path / "test_settings.json").read_text())
    assert kept["seeds"] == [0, 1, 2] and kept["rows"] == ["bc", "grpo"] and kept["commit"] == "abc123"
    run = episode_rl.Run(tmp_path, args)
    run.guard_test(rows)  # the same run again (a resumed one): allowed, and it may play
    assert run.frozen is None
    with pytest.raises(SystemExit, match="test runs once"):
        episode_rl.Run(tmp_path, args).guard_test(rows[:1])  # a part of the rows: refused
    with pytest.raises(SystemExit, match="test runs once"):
        episode_rl.Run(tmp_path, args).guard_test([*rows, episode_rl.Row.parse("sr")])  # a row added: refused
    with pytest.raises(SystemExit, match="other seeds"):
        episode_rl.Run(tmp_path, episode_args(seeds=[0, 1])).guard_test(rows)
    with pytest.raises(SystemExit, match="other settings"):
        episode_rl.Run(tmp_path, episode_args(lr=1e-4)).guard_test(rows)

    monkeypatch.setattr(_stages, "code_commit", lambda: "def456")
    run = episode_rl.Run(tmp_path, args)
    run.guard_test(rows)  # another commit: the record may reprint, nothing is played
    assert run.frozen and "abc123" in run.frozen
    with pytest.raises(SystemExit, match="still to play"):
        run.model(rows[0], 0, "test")

    for commit in ("abc123+dirty", "unknown"):
        monkeypatch.setattr(_stages, "code_commit", lambda commit=commit: commit)
        with pytest.raises(SystemExit, match="clean git checkout"):
            episode_rl.Run(tmp_path / commit, args).guard_test(rows)


def records(goal_by_instance: dict[str, float]) -> list[dict]:
    """A row's kept evaluation episodes: one greedy and one sampled per instance, each scoring its instance's goal."""
    return [
        {"instance": i, "seed": seed, "temperature": t, "kind": "bargaining", "goal": g, "success": float(g > 5)}
        for i, g in goal_by_instance.items()
        for t, seed in ((0.0, 0), (0.7, 1))
    ]


def test_a_kept_record_prints_its_table_without_its_adapters(tmp_path, monkeypatch, capsys):
    """A run folder committed without its adapters (a fresh machine) reprints its table from the kept evaluations
    and trains nothing; only a row with an episode still to play would train its stage again."""
    evals = tmp_path / "evals" / "dev"
    for row, seed, goals in (("base", "-", {"a": 0.0, "b": 1.0}), ("bc", "0", {"a": 4.0, "b": 7.0})):
        (evals / row).mkdir(parents=True)
        (evals / row / f"seed{seed}.json").write_text(json.dumps(records(goals)))
    (tmp_path / "stages.json").write_text(json.dumps({"bc/seed0": {"seconds": 12.0, "peak_rss_mb": 900}}))

    def no_training(*_args, **_kw):
        raise AssertionError("a kept record must not train")

    monkeypatch.setattr(episode_rl, "train_bc", no_training)
    argv = ["episode_rl.py", "--keep", str(tmp_path), "--split", "dev", "--seeds", "0", "--rows", "base,bc", "--k", "1"]
    monkeypatch.setattr(sys, "argv", argv)
    episode_rl.main()
    table = capsys.readouterr().out
    bc = next(line for line in table.splitlines() if line.startswith("| bc |"))
    assert "| 5.50 | 5.50 |" in bc and "+5.00 [" in bc and "12 s" in bc, bc
    assert not (tmp_path / "train").exists()

    argv[-3:] = ["bc", "--k", "2"]  # seed 2 of bc is still to play, so bc would train again
    (tmp_path / "train" / "bc" / "seed0" / "checkpoints").mkdir(parents=True)  # a cut-short training is not a stage
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(AssertionError, match="must not train"):
        episode_rl.main()


def test_grpo_is_compared_with_its_shuffled_control_directly(tmp_path, monkeypatch, capsys):
    """Besides each row against its start, the table gives GRPO against the shuffled-reward control, paired: the
    effect of the reward itself, on the same compute."""
    goals = {"grpo": {"a": 6.0, "b": 8.0}, "grpo-shuffled": {"a": 3.0, "b": 4.0}, "bc": {"a": 4.0, "b": 5.0}}
    for row, by_instance in goals.items():
        for seed in (0, 1):
            (tmp_path / "evals" / "dev" / row).mkdir(parents=True, exist_ok=True)
            (tmp_path / "evals" / "dev" / row / f"seed{seed}.json").write_text(json.dumps(records(by_instance)))
    argv = ["episode_rl.py", "--keep", str(tmp_path), "--split", "dev", "--seeds", "0,1", "--k", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--rows", "bc,grpo,grpo-shuffled"])
    episode_rl.main()
    contrast = (
        "grpo (T 0.0) vs grpo-shuffled (T 0.0) [95% nested; seed t]: +3.50 [+3.00, +4.00]; t [+3.50, +3.50] (2x2)"
    )
    assert contrast in capsys.readouterr().out

    monkeypatch.setattr(sys, "argv", [*argv, "--rows", "bc,grpo"])  # without its control, no contrast is printed
    episode_rl.main()
    assert "vs grpo-shuffled" not in capsys.readouterr().out


def write_test_records(folder: Path, seeds) -> None:
    for row, by_instance in (("base", {"a": 0.0, "b": 1.0}), ("bc", {"a": 4.0, "b": 7.0})):
        for seed in ["-"] if row == "base" else seeds:
            (folder / "evals" / "test" / row).mkdir(parents=True, exist_ok=True)
            (folder / "evals" / "test" / row / f"seed{seed}.json").write_text(json.dumps(records(by_instance)))


def test_no_test_table_is_printed_before_the_last_seed(tmp_path, monkeypatch, capsys):
    """A test run plays every recorded seed before it prints: a run stopped at seed 1 has printed nothing (seed
    0's episodes are kept), and the resumed run prints the table with every seed in, and the record it ran under."""
    monkeypatch.setattr(_stages, "code_commit", lambda: "abc123")
    monkeypatch.setattr(episode_rl.Run, "spec", lambda self, row, seed: f"{row.text}/seed{seed}")
    played: list[str] = []

    def fake_play(spec, args, scenarios, seeds, temperature, **kw):
        if spec == "bc/seed1" and "stop" in played:
            raise KeyboardInterrupt  # the session ends mid-run
        played.append(spec)
        goal = {"smollm2-135m": 0.0}.get(spec, 5.0)
        return [((i, s), fake_episode(goal)) for i in ("a", "b") for s in seeds]

    monkeypatch.setattr(episode_rl, "play", fake_play)
    argv = ["episode_rl.py", "--keep", str(tmp_path), "--split", "test", "--final", "--seeds", "0,1", "--k", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--rows", "base,bc"])
    played.append("stop")
    with pytest.raises(KeyboardInterrupt):
        episode_rl.main()
    assert capsys.readouterr().out == ""  # nothing printed before the last seed
    assert (tmp_path / "evals" / "test" / "bc" / "seed0.json").is_file()
    assert not (tmp_path / "evals" / "test" / "bc" / "seed1.json").exists()

    played.clear()
    episode_rl.main()
    out = capsys.readouterr().out
    assert played == ["bc/seed1", "bc/seed1"]  # only what was missing: seed 1, greedy and sampled
    assert "| bc | test |" in out and "seeds [0, 1], rows ['base', 'bc'], commit abc123" in out

    missing = {"base": {None: [1]}, "bc": {0: [1], 1: []}}
    assert _stages.seeds_missing(missing, [0, 1]) == ["bc seed 1"]


def fake_episode(goal: float):
    """A stand-in for a played episode: what ``episode_rl.evaluate`` reads of one."""
    from types import SimpleNamespace as NS

    turn = NS(agent="me", action=NS(error=None))
    log = NS(setup=NS(agent_names=["me", "partner"], scenario=NS(verifiable=NS(kind="bargaining"))), turns=[turn])
    return NS(log=log, reward=NS(value=goal, success=goal > 5))


def test_a_legacy_test_record_reprints_and_plays_nothing(tmp_path, monkeypatch, capsys):
    """A guard written before seeds and commit were kept (``benchmarks/runs/episode_rl``'s) is legacy: its table
    reprints with exactly the seeds its evaluations hold and its rows, and a run that would play a test episode
    there is refused."""
    (tmp_path / "test_settings.json").write_text(
        json.dumps({"settings": episode_rl.settings_of(episode_args(k=1)), "rows": ["base", "bc"]})
    )
    write_test_records(tmp_path, [0, 1])
    argv = ["episode_rl.py", "--keep", str(tmp_path), "--split", "test", "--final", "--k", "1", "--rows", "base,bc"]
    monkeypatch.setattr(sys, "argv", [*argv, "--seeds", "0,1"])
    episode_rl.main()
    out = capsys.readouterr().out
    assert "legacy record: reprint only" in out and "| bc | test | 5.50 | 5.50 |" in out

    for seeds, message in (("0", "legacy test record holds training seeds"), ("0,1,2", "legacy test record holds")):
        monkeypatch.setattr(sys, "argv", [*argv, "--seeds", seeds])
        with pytest.raises(SystemExit, match=message):
            episode_rl.main()
    greedy_only = [r for r in records({"a": 4.0, "b": 7.0}) if r["temperature"] == 0.0]  # sampled still to play
    (tmp_path / "evals" / "test" / "bc" / "seed1.json").write_text(json.dumps(greedy_only))
    monkeypatch.setattr(sys, "argv", [*argv, "--seeds", "0,1"])
    with pytest.raises(SystemExit, match="still to play"):
        episode_rl.main()


def test_the_committed_test_record_reprints(monkeypatch, capsys):
    """``benchmarks/runs/episode_rl``: its legacy test guard reprints the table README section 10.0 shows."""
    folder = Path(__file__).resolve().parent.parent / "benchmarks" / "runs" / "episode_rl"
    rows = "base,bc,bc@0.3,bc@0.5,grpo,grpo-shuffled,sr,sr-grpo"
    argv = ["episode_rl.py", "--keep", str(folder), "--split", "test", "--final", "--seeds", "0,1,2", "--rows", rows]
    monkeypatch.setattr(sys, "argv", argv)
    episode_rl.main()
    out = capsys.readouterr().out
    assert "legacy record: reprint only" in out
    assert "sr-grpo | test | 4.45 | 3.78 |" in out and "+1.00 [+0.55, +1.46]; t [+0.63, +1.38] (3x36)" in out


def test_a_stage_kept_without_its_adapter_trains_again_and_says_whether_its_weights_are_the_same(tmp_path):
    """The rule every RL benchmark keeps its stages by (``_stages.run_stage``): a stage is kept when its record and
    its model reference are there; one whose adapter is gone trains again, keeps its first record, and says
    whether the new weights equal the old."""
    import shutil

    from sotopia_env.model_ref import write_model_ref

    stages, stages_file, folder = {}, tmp_path / "stages.json", tmp_path / "train" / "bc" / "seed0"
    calls: list[bytes] = []

    def trainer(weights: bytes):
        def train() -> dict:
            calls.append(weights)
            (folder / "adapter").mkdir(parents=True, exist_ok=True)
            (folder / "adapter" / "adapter_model.safetensors").write_bytes(weights)
            write_model_ref(folder, "smollm2-135m", "adapter", "sotopia")
            return {"note": "", "first": weights == b"one"}

        return train

    _stages.run_stage(stages, stages_file, "bc/seed0", folder, trainer(b"one"), threads=2)
    _stages.run_stage(stages, stages_file, "bc/seed0", folder, trainer(b"two"))  # kept: not trained
    assert calls == [b"one"] and stages["bc/seed0"]["threads"] == 2
    first_digest = stages["bc/seed0"]["adapter_sha256"]

    for weights, same in ((b"one", True), (b"two", False)):
        shutil.rmtree(tmp_path / "train")  # a committed record: no adapters
        _stages.run_stage(stages, stages_file, "bc/seed0", folder, trainer(weights))
        assert stages["bc/seed0"]["retrained"][-1]["same"] is same
    kept = json.loads(stages_file.read_text())["bc/seed0"]
    assert kept["first"] is True and kept["adapter_sha256"] == first_digest and len(kept["retrained"]) == 2
    assert calls == [b"one", b"one", b"two"]


def test_game_rl_pairs_by_episode_and_runs_test_once(tmp_path, monkeypatch):
    """``game_rl.py`` follows the same protocol: its units are (instance, evaluation seed) episodes (rule players
    are stochastic, and a game's dev split may hold one instance), its test split needs ``--final`` and runs once."""
    import game_rl

    by_seed = {0: [{"instance": "g", "seed": s, "greedy": False, "goal": float(s)} for s in (1, 2, 3)]}
    by_seed[0].append({"instance": "g", "seed": 0, "greedy": True, "goal": 9.0})
    assert game_rl.goal_cells(by_seed, greedy=False) == {0: {"g#1": 1.0, "g#2": 2.0, "g#3": 3.0}}
    base = {None: [{"instance": "g", "seed": s, "greedy": False, "goal": 0.0} for s in (1, 2, 3)]}
    mean, _, _, n_seeds, n_units = _stages.nested_interval(
        game_rl.goal_cells(by_seed, False), game_rl.goal_cells(base, False), resamples=200
    )
    assert (mean, n_seeds, n_units) == (2.0, 1, 3)

    argv = ["game_rl.py", "--keep", str(tmp_path), "--split", "test"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit, match="--final"):
        game_rl.main()
    args = argparse.Namespace(
        game="negotiation-game", role="proposer", bc_games=8, bc_epochs=2.0, bc_lr=1e-3, steps=6, lr=5e-4, k=4,
        groups=4, group_size=4, resample=2, max_new_tokens=64, temperature=0.7, seeds="0,1,2", eval_seed=0,
    )  # fmt: skip
    seeds = [0, 1, 2]
    guard = lambda: _stages.guard_test_once(tmp_path, game_rl.settings_of(args), game_rl.ROWS, True, seeds, "abc")  # noqa: E731
    assert guard() is None
    assert guard() is None  # the same run again: allowed
    seeds = [0]
    with pytest.raises(SystemExit, match="other seeds"):
        guard()
    seeds = [0, 1, 2]
    args.steps = 12
    with pytest.raises(SystemExit, match="test runs once"):
        guard()


def test_social_iqa_splits_are_disjoint_and_its_test_runs_once(tmp_path, monkeypatch):
    """``rl_signal.py`` follows the protocol: train, dev and test items are disjoint; ``--split test`` needs
    ``--final`` and ``--out``, and its settings are kept there."""
    import rl_signal

    args = argparse.Namespace(data=rl_signal.DEFAULT_DATA, seed=0, train=200, heldout=50)
    if not args.data.is_file():
        pytest.skip(f"SKIPPED LOUDLY: no Social IQa sample at {args.data}")
    train, dev, test = rl_signal.split_items(args)
    assert (len(train), len(dev), len(test)) == (200, 50, 46)  # 300 lines, 296 distinct unambiguous questions
    keys = [{(i.context, i.question) for i in part} for part in (train, dev, test)]
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])

    for extra, message in (([], "--final"), (["--final", "--out", str(tmp_path)], "test runs once")):
        if extra:
            (tmp_path / "test_settings.json").write_text('{"settings": {"train": "1"}, "rows": []}')
        monkeypatch.setattr(sys, "argv", ["rl_signal.py", "--split", "test", *extra])
        with pytest.raises(SystemExit, match=message):
            rl_signal.main()


def test_social_iqa_test_run_evaluates_the_dev_runs_models(tmp_path):
    """A stage finished in ``--out`` is kept (the test run evaluates the models the dev run trained, not new ones),
    and a run under other training settings is refused there, so kept models are never those of other settings."""
    import rl_signal

    from sotopia_env.training.sft import RESULT_FILE, TrainResult

    data = tmp_path / "items.jsonl"
    data.write_text('{"context": "c", "question": "q"}\n')
    args = argparse.Namespace(data=data, train=200, heldout=50, seed=0, bc_epochs=2.0, bc_steps=-1, grpo_steps=10)
    rl_signal.keep_training_settings(tmp_path, args)
    rl_signal.keep_training_settings(tmp_path, args)  # the same settings again: allowed

    stage = tmp_path / "bc" / "seed0"
    calls = []
    trained = rl_signal.kept(stage, lambda *a: calls.append(a) or "trained", 1, 2)
    assert trained == "trained" and calls == [(1, 2)]
    stage.mkdir(parents=True)
    TrainResult(model_dir=str(stage), losses=[1.0], steps=3, examples=8, seconds=60.0).save(stage / RESULT_FILE)
    kept = rl_signal.kept(stage, lambda *a: calls.append(a) or "trained", 1, 2)
    assert isinstance(kept, TrainResult) and kept.steps == 3 and len(calls) == 1  # not trained again

    args.bc_epochs = 3.0
    with pytest.raises(SystemExit, match="trained under"):
        rl_signal.keep_training_settings(tmp_path, args)
    data.write_text('{"context": "other", "question": "q"}\n')
    args.bc_epochs = 2.0
    with pytest.raises(SystemExit, match="trained under"):  # the same path, other items
        rl_signal.keep_training_settings(tmp_path, args)
