"""The statistics and guards behind ``benchmarks/episode_rl.py``'s claims: the hierarchical paired bootstrap
(training seeds and instances resampled, crossed), the row grammar, and the rule that test runs once."""

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
    mean, low, high, n_seeds, n_instances = _stages.hierarchical_interval(mine, reference, resamples=1000)
    assert (n_seeds, n_instances) == (3, 36)
    assert low < 1.0 < high and low > 0
    mine, reference = cells_for(0.0, 0.1, 0.5, rng)
    _, low, high, _, _ = _stages.hierarchical_interval(mine, reference, resamples=1000)
    assert low < 0 < high


def test_seed_to_seed_noise_widens_the_interval():
    """Resampling training seeds is what makes one lucky seed unable to carry a claim: the same cells with a
    large per-seed spread give a wider interval than with none."""
    narrow = _stages.hierarchical_interval(*cells_for(1.0, 0.0, 0.5, np.random.default_rng(2)), resamples=1000)
    wide = _stages.hierarchical_interval(*cells_for(1.0, 1.5, 0.5, np.random.default_rng(2)), resamples=1000)
    assert wide[2] - wide[1] > 2 * (narrow[2] - narrow[1])


def test_coverage_is_about_95_percent_under_the_null():
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(60):
        mine, reference = cells_for(0.0, 0.3, 1.0, rng, seeds=3, instances=12)
        _, low, high, _, _ = _stages.hierarchical_interval(mine, reference, resamples=400)
        covered += low <= 0 <= high
    assert covered >= 48  # 80% at the least over 60 draws; a broken resampler (no seed level) covers far less


def test_a_reference_without_seeds_pairs_with_every_seed():
    mine = {0: {"a": 3.0, "b": 4.0}, 1: {"a": 5.0, "b": 6.0}}
    base = {None: {"a": 1.0, "b": 2.0}}
    mean, low, high, n_seeds, n_instances = _stages.hierarchical_interval(mine, base, resamples=200)
    assert mean == pytest.approx(3.0) and (n_seeds, n_instances) == (2, 2)
    assert 2.0 <= low <= high <= 4.0


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


def test_test_runs_once_under_one_set_of_settings(tmp_path):
    args = argparse.Namespace(
        steps=10, lr=2e-4, iterations=2, beta=0.1, bc_epochs=3.0, bc_lr=1e-3, sr_samples=2, max_turns=6,
        max_new_tokens=40, temperature=0.7, train_scenarios="verifiable:train", k=8, eval_seed=0, final=True,
    )  # fmt: skip
    rows = [episode_rl.Row.parse(r) for r in ("bc", "grpo")]
    episode_rl.Run(tmp_path, args).guard_test(rows)
    episode_rl.Run(tmp_path, args).guard_test(rows[:1])  # the same settings, a row already run: allowed
    args.lr = 1e-4
    with pytest.raises(SystemExit, match="test runs once"):
        episode_rl.Run(tmp_path, args).guard_test(rows)


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
    assert "grpo vs grpo-shuffled, sampled [95% hier.]: +3.50 [+3.00, +4.00] (2x2)" in capsys.readouterr().out

    monkeypatch.setattr(sys, "argv", [*argv, "--rows", "bc,grpo"])  # without its control, no contrast is printed
    episode_rl.main()
    assert "vs grpo-shuffled" not in capsys.readouterr().out


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
    mean, _, _, n_seeds, n_units = _stages.hierarchical_interval(
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
    _stages.guard_test_once(tmp_path, game_rl.settings_of(args), game_rl.ROWS, True)
    _stages.guard_test_once(tmp_path, game_rl.settings_of(args), game_rl.ROWS, True)  # the same run again: allowed
    args.steps = 12
    with pytest.raises(SystemExit, match="test runs once"):
        _stages.guard_test_once(tmp_path, game_rl.settings_of(args), game_rl.ROWS, True)


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
