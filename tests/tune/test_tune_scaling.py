"""Scaling sweeps: the power-law fit against a plain reference and hand-made laws, the compute frontier, trial
resources from the cluster's, each trainer's axes (parameters, training data) as the sweep counts them, and tiny real
sweeps (Ray Tune + ASHA over world-model runs on synthetic games, over policy runs on simulator battles) that write
their table, fit and figure."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from tune.scaling import SweepConfig
from tune.scaling_fit import fit_power_law, fit_power_law_reference, frontier, t_975
from tune.sweeps import trial_resources


def test_an_exact_power_law_is_recovered_with_a_zero_width_interval():
    x = np.array([1e3, 1e4, 1e5, 1e6])
    law = fit_power_law(x, 5.0 * x ** -0.3)
    assert law.exponent == pytest.approx(0.3) and law.coefficient == pytest.approx(5.0)
    assert law.exponent_high - law.exponent_low == pytest.approx(0.0, abs=1e-9) and law.r2 == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(3))
def test_the_fit_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    x = np.geomspace(10, 1e5, 7)
    y = 3.0 * x ** -0.2 * np.exp(rng.normal(0, 0.05, len(x)))
    law = fit_power_law(x, y)
    coefficient, exponent, half = fit_power_law_reference(x.tolist(), y.tolist())
    assert (law.coefficient, law.exponent) == pytest.approx((coefficient, exponent))
    assert (law.exponent_low, law.exponent_high) == pytest.approx((exponent - half, exponent + half))
    assert law.exponent_low < 0.2 < law.exponent_high  # the interval covers the true exponent here


def test_two_points_fit_without_an_interval_and_one_x_is_refused():
    law = fit_power_law([10, 100], [1.0, 0.5])
    assert law.exponent == pytest.approx(math.log10(2)) and math.isnan(law.exponent_low)
    with pytest.raises(ValueError, match="2 distinct x"):
        fit_power_law([10, 10], [1.0, 0.5])


def test_t_quantiles():
    assert t_975(1) == 12.706 and t_975(30) == 2.042 and t_975(60) == pytest.approx(2.0, abs=0.002)
    assert math.isnan(t_975(0))


def test_the_frontier_keeps_the_best_loss_for_each_budget():
    points = [(1, 5.0), (2, 4.0), (2, 3.5), (3, 4.5), (4, 3.0), (5, 3.0)]
    assert frontier(points) == [(1, 5.0), (2, 3.5), (4, 3.0)]


def test_trial_resources_follow_the_cluster():
    cpu = trial_resources({"CPU": 2.0})
    assert (cpu.use_gpu, cpu.max_concurrent, cpu.torch_threads) == (False, 1, 1) and 0 < cpu.cpus_per_worker < 1
    assert trial_resources({"CPU": 16.0}).max_concurrent == 8
    gpu = trial_resources({"CPU": 32.0, "GPU": 4.0})
    assert gpu.use_gpu and gpu.max_concurrent == 4 and gpu.cpus_per_worker >= 1
    assert trial_resources({"CPU": 32.0, "GPU": 4.0}, asked_concurrent=8).max_concurrent == 4  # a GPU each


def test_the_sweep_config_checks_its_axes():
    with pytest.raises(ValueError, match="--train-shares"):
        SweepConfig(shards="s", out="o", train_shares=[0.0])
    with pytest.raises(ValueError, match="multiple of --eval-every"):
        SweepConfig(shards="s", out="o", steps=10, eval_every=4)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_tiny_sweep_writes_its_table_fit_and_figure(three_synthetic_games, tmp_path):
    from tune.scaling import TARGETS, run

    metric = TARGETS["melee_frames"].metric
    # two trials at once: most of a tiny trial is its actors' start-up (the default on 2 CPUs, one trial at a time,
    # is checked by test_trial_resources_follow_the_cluster and taken by tests/tune/test_tune_ppo_sweep.py's sweep).
    # The session's 3 synthetic games: one held out (validation share 0.3), two to train, one at train share 0.5.
    sweep = SweepConfig.tiny(shards=str(three_synthetic_games), out=str(tmp_path / "sweep"), max_concurrent=2)
    logs: list[str] = []
    grid = run(sweep, log=logs.append)
    assert len(grid) == 4 and not grid.errors
    ends = [line for line in logs if line.startswith("[sweep] trial ")]
    assert len(ends) == 4 and ends[-1].startswith("[sweep] trial 4/4 done: d") and f"best {metric} " in ends[-1]
    with open(tmp_path / "sweep" / "scaling.csv") as fh:
        rows = list(csv.DictReader(fh))
    trials = {(int(r["d_model"]), float(r["train_share"])) for r in rows}
    assert trials == {(16, 0.5), (16, 1.0), (32, 0.5), (32, 1.0)}
    assert all(math.isfinite(float(r[metric])) and float(r["compute"]) > 0 for r in rows)
    params = {int(r["d_model"]): int(r["parameters"]) for r in rows}
    frames = {float(r["train_share"]): int(r["train_frames"]) for r in rows}
    assert params[16] < params[32] and frames[0.5] < frames[1.0]
    # ASHA at the grace step (4) keeps about half the trials; the rest stop before step 8
    finished = {(int(r["d_model"]), float(r["train_share"])) for r in rows if int(r["step"]) == sweep.steps}
    assert 1 <= len(finished) <= 4
    assert "| compute |" in (tmp_path / "sweep" / "scaling.md").read_text()
    assert (tmp_path / "sweep" / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "sweep" / "trials").is_dir() and (tmp_path / "sweep" / "tune" / "ray" / "sweep").is_dir()


def test_a_sweep_never_reuses_a_folder(tmp_path):
    from tune.scaling import run

    (tmp_path / "trials").mkdir()
    with pytest.raises(FileExistsError, match="never overwritten"):
        run(SweepConfig.tiny(shards="unused", out=str(tmp_path)))


def test_the_policy_axes_count_its_parameters_and_kept_turns(tiny_generated):
    from shards_schema.reader import open_version
    from training.pokemon.windows import window_specs
    from tune.scaling import target_of

    _, published, _ = tiny_generated
    sweep = SweepConfig.tiny(shards=str(published.path), out="unused")
    target, version = target_of(sweep.shards), open_version(published.path)
    assert target.unit == "turns" and target.metric == "val_loss_actor"
    sizes = [target.parameters(sweep, version, d) for d in (16, 32)]
    assert 0 < sizes[0] < sizes[1]
    turns = {share: target.training_units(sweep, version, share) for share in (0.5, 1.0)}
    held = window_specs(version, 8, 0, validation_share=sweep.validation_share, split_seed=sweep.seed,
                        validation=True).column("num_rows").to_numpy().sum()
    assert 0 < turns[0.5] < turns[1.0] and turns[1.0] + held == sum(r["num_rows"] for r in
                                                                      version.index().to_pylist())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_tiny_policy_sweep_fits_loss_against_turns(tiny_generated, tmp_path):
    from tune.scaling import run

    _, published, _ = tiny_generated
    sweep = SweepConfig.tiny(shards=str(published.path), out=str(tmp_path / "sweep"), sizes=[16, 32],
                             train_shares=[1.0], context=8, max_concurrent=2)  # both trials at once, as above
    grid = run(sweep, log=lambda *_: None)
    assert len(grid) == 2 and not grid.errors
    with open(tmp_path / "sweep" / "scaling.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {int(r["d_model"]) for r in rows} == {16, 32} and {"train_turns", "turns_seen"} <= set(rows[0])
    assert all(0 < float(r["val_loss_actor"]) < 10 for r in rows)
    assert int(rows[0]["turns_seen"]) == int(rows[0]["step"]) * sweep.batch_size * sweep.context
    assert "val_loss_actor against" in (tmp_path / "sweep" / "scaling.md").read_text()


def test_shards_no_trainer_sweeps_are_refused_by_name(tiny_generated, monkeypatch):
    import tune.scaling

    _, published, _ = tiny_generated
    monkeypatch.setattr(tune.scaling, "TARGETS", {"melee_frames": tune.scaling.TARGETS["melee_frames"]})
    with pytest.raises(ValueError, match=r"holds 'pokemon_turns' shards; a scaling sweep trains on \['melee_frames'\]"):
        tune.scaling.target_of(str(published.path))


def test_the_axes_fit_each_trials_best_validation_not_its_last():
    """A trial that overfits (its loss rising after step 1) counts with its best; the frontier keeps every point."""
    from tune.scaling import TARGETS, fits

    target = TARGETS["pokemon_turns"]
    curves = {(10, 100): [2.0, 1.0, 3.0], (10, 1000): [2.0, 0.5, 0.4], (20, 100): [1.5, 0.8, 2.5],
              (20, 1000): [1.5, 0.4, 0.3]}
    rows = [{"d_model": n, "train_share": d / 1000, "parameters": n, "train_turns": d, "step": step,
             "compute": float(n * step), "val_loss_actor": loss, "stopped_early": False}
            for (n, d), losses in curves.items() for step, loss in enumerate(losses, start=1)]
    fitted = fits(rows, target)
    assert fitted["parameters"][1] == [(10, 0.4), (20, 0.3)]
    assert fitted["train_turns"][1] == [(100, 0.8), (1000, 0.3)]  # the 100-turn trials' best, not their 3.0 and 2.5
    assert fitted["train_turns"][0].exponent == pytest.approx(math.log10(0.8 / 0.3))
