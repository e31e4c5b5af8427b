"""Training on several shard versions at once (``--extra-shards``): two real versions of ``pokemon_turns`` (parsed
from disjoint bench replays) cut into one shuffled epoch whose windows each read from their own version, a run on
both that records both and resumes exactly, and the refusals: a resume with another list of versions, a version of
another dataset, a version given twice."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import shared_data

from shards_schema.reader import open_version
from training.checkpoints import CheckpointError, read_checkpoint, shard_identity
from training.loop import latest_checkpoint
from training.pokemon.offline_rl import PolicyRecipe, TrainConfig, run
from training.pokemon.windows import LoadTurnWindows, window_specs
from training.windows import VERSION_COLUMN, open_shards


@pytest.fixture(scope="module")
def two_versions(ray_local, tmp_path_factory) -> list[str]:
    """Two published versions of pokemon_turns: 2 gen1ou battles, then 2 gen9ou battles (4 trajectories each)."""
    from pipelines.parse_replays import ParseConfig
    from pipelines.parse_replays import run as parse

    bench = shared_data("pokemon", "bench_replays")
    tmp = tmp_path_factory.mktemp("extra_shards")

    def publish(fmt: str) -> str:
        root = tmp / fmt
        root.mkdir()
        for replay in sorted(bench.glob(f"{fmt}/*.json"))[:2]:
            shutil.copy(replay, root / replay.name)
        # one parse actor of a quarter CPU each, its read task an eighth: both jobs fit on the session's 2 CPUs at
        # once with room to spare (an actor holds its CPUs for the whole job, and a job whose read task finds no room
        # beside the actors never moves)
        cfg = ParseConfig.tiny(source="showdown-json", input=str(root), out=str(tmp / f"out-{fmt}"),
                               num_parse_actors=1, cpus_per_actor=0.25)
        return str(parse(cfg, log=lambda *_: None).path)

    # both jobs at once: most of a tiny job is its actors' start-up
    with ThreadPoolExecutor(1) as pool:
        later = pool.submit(publish, "gen9ou")
        return [publish("gen1ou"), later.result()]


def _windows(paths: list[str], seed: int = 0, **overrides):
    cfg = TrainConfig.tiny(shards=paths[0], extra_shards=paths[1:], out="-", seed=seed, **overrides)
    version = open_shards(cfg.shard_paths(), check_sha256=False)
    return PolicyRecipe(cfg, PolicyRecipe.make_plan(cfg, version)).epoch_windows(version, 0)


def _spans(table) -> list[tuple]:
    return sorted(zip(*(table.column(k).to_pylist() for k in ("file", "row_start", "num_rows")), strict=True))


def test_an_epoch_holds_the_windows_of_both_versions_in_one_seeded_order(two_versions):
    a, b = two_versions
    single = [_windows([a]), _windows([b])]
    both = _windows([a, b])
    assert both.num_rows == single[0].num_rows + single[1].num_rows > 0
    numbers = np.asarray(both.column(VERSION_COLUMN))
    for number, alone in enumerate(single):  # each version's windows, each once, with its number
        assert _spans(both.filter(numbers == number)) == _spans(alone)
    assert VERSION_COLUMN not in single[0].column_names  # one version is read as it always was
    # shuffled together (not one version after the other), and a pure function of the versions in order and seed
    assert 0 < np.flatnonzero(numbers == 1).min() < np.flatnonzero(numbers == 0).max()
    assert both.equals(_windows([a, b]))
    assert not both.equals(_windows([a, b], seed=1))
    swapped = _windows([b, a])
    assert swapped.num_rows == both.num_rows and not swapped.drop_columns([VERSION_COLUMN]).equals(
        both.drop_columns([VERSION_COLUMN]))
    # the validation split goes by battle id across both versions
    train = _windows([a, b], validation_share=0.5)
    val = window_specs(open_shards([a, b]), 8, 0, validation_share=0.5, split_seed=0, validation=True)
    assert train.num_rows + val.num_rows == both.num_rows and 0 < val.num_rows < both.num_rows


def test_the_loader_reads_each_window_from_its_own_version(two_versions):
    a, b = two_versions
    both = _windows([a, b])
    batch = {k: both.column(k).to_numpy(zero_copy_only=False) for k in both.column_names}
    batch["window"] = np.arange(both.num_rows)
    joined = LoadTurnWindows([a, b], 8)(batch)
    for number, path in enumerate((a, b)):
        rows = batch[VERSION_COLUMN] == number
        alone = LoadTurnWindows(path, 8)({k: v[rows] for k, v in batch.items() if k != VERSION_COLUMN})
        for key, value in alone.items():
            assert np.array_equal(joined[key][rows], value), key


def test_another_dataset_or_a_repeated_version_is_refused(two_versions, synthetic_frames):
    a, b = (open_version(p) for p in two_versions)
    with pytest.raises(CheckpointError, match=r"schema melee_frames \(--shards: pokemon_turns\).*feature spec "
                                              r"melee_features \(--shards: pokemon_observation\)"):
        shard_identity(a, [b, open_version(synthetic_frames)])
    with pytest.raises(CheckpointError, match="already given"):
        shard_identity(a, [b, a])
    with pytest.raises(CheckpointError, match="schema melee_frames"):  # before any training starts
        run(TrainConfig.tiny(shards=two_versions[0], extra_shards=[str(synthetic_frames)], out="-"))


def test_a_run_on_two_versions_records_both_and_resumes_exactly(two_versions, tmp_path, capsys):
    a, b = two_versions
    straight = tmp_path / "straight"
    run(TrainConfig.tiny(shards=a, extra_shards=[b], out=str(straight), steps=4, checkpoint_every=2))
    epoch = _windows([a, b]).num_rows
    assert f"({epoch} windows an epoch)" in capsys.readouterr().out
    end = read_checkpoint(latest_checkpoint(straight))
    names = (open_version(a).manifest.version, open_version(b).manifest.version)
    assert end.step == 4 and end.data.versions == names and end.train_config["extra_shards"] == [b]
    assert end.data == shard_identity(open_version(a), [open_version(b)])

    # a run stopped after its step-2 checkpoint goes on to the same weights
    resumed = tmp_path / "resumed"
    shutil.copytree(straight, resumed)
    shutil.rmtree(Path(latest_checkpoint(resumed)))
    assert read_checkpoint(latest_checkpoint(resumed)).step == 2
    run(TrainConfig.tiny(shards=a, extra_shards=[b], out=str(resumed), steps=4, resume=True))
    again = read_checkpoint(latest_checkpoint(resumed))
    assert again.step == 4
    assert all(torch.equal(end.model[k], again.model[k]) for k in end.model)

    # another list of versions (fewer, or the same in another order) is other data: refused, naming both
    for shards, extra in ((a, []), (b, [a])):
        with pytest.raises(CheckpointError, match=rf"trained on pokemon_turns/{names[0]} \+ {names[1]}, --shards"):
            run(TrainConfig.tiny(shards=shards, extra_shards=extra, out=str(straight), steps=9, resume=True))
    # fine-tuning on other data stays allowed: --init-from checks the feature spec only (fit's check)
    end.check_features(shard_identity(open_version(b)))
