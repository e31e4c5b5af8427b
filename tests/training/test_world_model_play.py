"""Playing the world model: rollouts from real seeds stay within bounds, round-trip through frame shards, drift
against the real replay, the CLI, and the two-player environment.

The models are untrained tiny ones, one of them made wild (huge position and percent changes, every class null,
every flag set): the bounds and the round trip must hold whatever the model predicts."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import shared_data

from models.world_model import WorldModel, WorldModelConfig
from pipelines.melee.features import featurize
from shards_schema.melee_features import BINARY_INDEX, CAT_FIELDS, CAT_INDEX, CONT_INDEX, PLAYERS
from training.melee.env import MeleeWorldEnv, frame_outcome, zero_sum_reward
from training.melee.rollout_rules import (
    BLAST_ZONES,
    DEFAULT_BLAST_ZONE,
    Frame,
    RolloutRules,
    apply_rules,
    blast_zone,
    non_null_argmax,
)
from training.melee.world_model_play import main
from training.melee.world_model_rollout import (
    RandomPolicy,
    WorldModelSim,
    copy_last_frame,
    drift,
    game_row,
    load_seed,
    rollout,
    rollout_game_id,
    write_rollouts,
)

GAMES = ("slippijs__PichuVSelf-All-22.slp", "peppi__v3.18.slp")
"""Final Destination, Slippi 3.7 (projectiles with owners, Ice Climbers' Nana), 1490 frames; Fountain of Dreams,
Slippi 3.18 (hitlag recorded), 941 frames."""
PICHU = 0


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Frame-by-frame stepping of one game is latency-bound: on the shared 2-core machine a GELU over one (1, 1, 64)
    frame took 15.6 ms with 2 OpenMP threads and 0.035 ms with 1."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def frames_version(tmp_path_factory):
    """A melee_frames version of two shared replays made by the parse job's own stages (its parse actor class and
    its ShardWriter), called in process without Ray Data: the job on Ray took 28 s for these two replays on the
    shared 2-core machine, this takes about 1 s."""
    from pipelines.job.parse import ParseInputs
    from pipelines.melee.slp import FRAME_PARQUET_OPTIONS
    from pipelines.melee.source import SlpConfig
    from pipelines.parse_replays import ParseConfig
    from pipelines.stages import read_row
    from pipelines.writer.naming import VersionSpec
    from pipelines.writer.publish import ShardWriter
    from shards_schema.melee import CODE_VERSIONS as MELEE_FRAMES
    from shards_schema.melee import FRAMES_SCHEMA, GAMES_SCHEMA
    from shards_schema.reader import open_version

    root = shared_data("melee", "slp")
    paths = [root / name for name in GAMES]
    if not all(p.exists() for p in paths):
        pytest.skip(f"{GAMES} are not all in {root}")
    batch = pa.Table.from_pylist([read_row(game, p.read_bytes()) for game, p in zip(GAMES, paths, strict=True)])
    cfg = ParseConfig(source="slp", out="unused", options=SlpConfig(min_frames=0, allow_cpu=True))
    results = ParseInputs(cfg.make_source()).parse_batch(batch)
    assert [r.status for r in results.records] == ["written"] * len(GAMES)
    spec = VersionSpec(out_root=str(tmp_path_factory.mktemp("frames")), dataset="melee_frames", code=MELEE_FRAMES,
                       source="slp", source_revision=None, config={"test": "play"}, planned_inputs=",".join(GAMES))
    writer = ShardWriter(spec, schema=FRAMES_SCHEMA, index_schema=GAMES_SCHEMA, shard_size_bytes=1 << 26,
                         parquet_options=FRAME_PARQUET_OPTIONS)
    writer.add_batch(results)
    return open_version(writer.publish().path)


def _games(version) -> dict[str, dict]:
    return {row["input_id"]: row for row in version.index().to_pylist()}


def _tiny(wild: bool = False) -> WorldModel:
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.preset("tiny")).eval()
    if wild:  # changes of ±100 units a frame, percent +1000 a frame, every class null, every flag set
        with torch.no_grad():
            model.cont_head.bias.copy_(torch.where(torch.arange(model.cont_head.out_features) % 2 == 0, 50.0, -50.0))
            model.cont_head.bias[CONT_INDEX["p0.percent"]] = 100.0
            offsets = np.concatenate([[0], np.cumsum([c for _, c in CAT_FIELDS])[:-1]])
            model.cat_head.bias[torch.as_tensor(offsets)] += 1000.0
            model.binary_head.bias.fill_(1000.0)
    return model


@pytest.fixture(scope="module", params=["untrained", "wild"])
def random_rollout(request, frames_version):
    """600 frames of random controllers after 60 real frames from the middle of the Final Destination game."""
    game = _games(frames_version)[GAMES[PICHU]]
    seed = load_seed(frames_version, game["game_id"], game["first_frame"] + 400, 60)
    r = rollout(_tiny(request.param == "wild"), seed, (RandomPolicy(0), RandomPolicy(1)), 600)
    return request.param, seed, r


def test_blast_zones_of_the_legal_stages():
    assert blast_zone(32) == (-246.0, 246.0, 188.0, -140.0)  # Final Destination (libmelee BLASTZONES)
    assert blast_zone(31) == (-224.0, 224.0, 200.0, -108.8)  # Battlefield
    assert set(BLAST_ZONES) == {2, 3, 8, 28, 31, 32}
    assert blast_zone(24) == DEFAULT_BLAST_ZONE  # Hyrule Temple: not measured, the generous box


def test_rules_make_a_wild_frame_legal(frames_version):
    game = _games(frames_version)[GAMES[PICHU]]
    seed = load_seed(frames_version, game["game_id"], game["first_frame"] + 400, 4)
    rules = RolloutRules.from_seed(seed)
    assert rules.projectiles and rules.owners and rules.zone == BLAST_ZONES[32]
    prev = Frame.at(seed, -1)
    wild = Frame.at(seed, -1)
    wild.cont[CONT_INDEX["p0.x"]], wild.cont[CONT_INDEX["p1.y"]] = 1e6, -1e6
    wild.cont[CONT_INDEX["p0.percent"]], wild.cont[CONT_INDEX["p1.shield"]] = 5000.0, -5.0
    wild.cont[CONT_INDEX["p0.vel_self_y"]], wild.cont[CONT_INDEX["p1.hitlag"]] = np.nan, -3.0
    wild.cat[CAT_INDEX["p0.stocks"]] = 8  # 7 stocks: more than 4, and more than the frame before
    wild.cat[CAT_INDEX["p1.action"]] = 0  # null where the version records it
    wild.cat[CAT_INDEX["p0.action"]] = prev.cat[CAT_INDEX["p0.action"]]  # same action: age + 1
    wild.binary[BINARY_INDEX["proj3.present"]] = 1.0
    wild.cat[CAT_INDEX["proj3.type"]] = 0
    fallback = np.full(len(CAT_FIELDS), 7)
    out = apply_rules(prev, wild, fallback, rules)
    assert out.value("p0.x") == pytest.approx(246.0) and out.value("p1.y") == pytest.approx(-140.0)
    assert out.value("p0.percent") == pytest.approx(999.0) and out.value("p1.shield") == 0.0
    assert out.value("p0.vel_self_y") == prev.value("p0.vel_self_y")
    assert out.stocks(0) == prev.stocks(0) and out.cat[CAT_INDEX["p1.action"]] == 7
    assert out.cont[CONT_INDEX["p0.state_age"]] == pytest.approx(prev.cont[CONT_INDEX["p0.state_age"]] + 0.01)
    assert out.cont[CONT_INDEX["p1.state_age"]] == 0.0  # a new action starts at age 0
    assert out.cat[CAT_INDEX["proj3.type"]] == 7 and out.cont_valid[CONT_INDEX["proj3.x"]]
    assert wild.cont[CONT_INDEX["p0.x"]] == 1e6  # pure: the input is untouched
    assert prev.stocks(1) > 0  # a lost stock: the next one starts at 0%
    ko = Frame.at(seed, -1)
    ko.cat[CAT_INDEX["p1.stocks"]] -= 1
    ko.cont[CONT_INDEX["p1.percent"]] = 0.8
    assert apply_rules(prev, ko, fallback, rules).value("p1.percent") == 0.0


def test_rollout_of_600_frames_stays_within_bounds(random_rollout):
    kind, seed, r = random_rollout
    g = r.generated
    assert len(g["cat"]) == 600 and len(r.features["cat"]) == 660
    for key in ("cont", "binary", "ctrl"):
        assert np.isfinite(g[key]).all(), key
    left, right, top, bottom = BLAST_ZONES[32]
    for p in PLAYERS:
        x, y = g["cont"][:, CONT_INDEX[f"{p}.x"]] * 100, g["cont"][:, CONT_INDEX[f"{p}.y"]] * 100
        assert (x >= left - 1e-3).all() and (x <= right + 1e-3).all() and (y >= bottom - 1e-3).all() \
            and (y <= top + 1e-3).all(), (kind, p)
        percent = g["cont"][:, CONT_INDEX[f"{p}.percent"]] * 100
        assert (percent >= 0).all() and (percent <= 999.0 + 1e-3).all()
        shield = g["cont"][:, CONT_INDEX[f"{p}.shield"]] * 60
        assert (shield >= 0).all() and (shield <= 60.0 + 1e-3).all()
        assert (g["cont"][:, CONT_INDEX[f"{p}.hitlag"]] >= 0).all()
        stocks = g["cat"][:, CAT_INDEX[f"{p}.stocks"]] - 1
        assert (stocks >= 0).all() and (stocks <= 4).all() and (np.diff(stocks) <= 0).all()
        action = r.features["cat"][59:, CAT_INDEX[f"{p}.action"]]
        age = r.features["cont"][59:, CONT_INDEX[f"{p}.state_age"]] * 100
        same = action[1:] == action[:-1]
        assert np.allclose(age[1:][same], age[:-1][same] + 1, atol=1e-3) and (age[1:][~same] == 0).all()
    classes = np.array([c for _, c in CAT_FIELDS])
    assert (g["cat"] >= 0).all() and (g["cat"] < classes).all()
    recorded = seed["cat"][-1] > 0
    steady = [i for i, (name, _) in enumerate(CAT_FIELDS) if name.startswith(PLAYERS) and "nearest" not in name]
    assert ((g["cat"][:, steady] > 0) == recorded[steady]).all(), "recorded fields stay recorded, others null"
    if kind == "wild":  # the rules, not the model, held it: it pushed every position out and every class to null
        assert np.isclose(g["cont"][-1, CONT_INDEX["p0.percent"]] * 100, 999.0)
        assert (g["binary"][:, BINARY_INDEX["proj0.present"]] == 1).all()


def test_rollout_round_trips_through_frame_shards(random_rollout, frames_version, tmp_path):
    from shards_schema.melee import FRAMES_SCHEMA, GAMES_SCHEMA
    from shards_schema.reader import open_version

    kind, seed, r = random_rollout
    game_id = rollout_game_id(seed["game"]["game_id"], {"test": kind})
    published = write_rollouts([(r, game_id)], tmp_path, dataset="melee_rollouts", source_revision="test",
                               config={"test": kind})
    version = open_version(published.path)
    for f in version.files:
        assert pq.read_schema(f).equals(FRAMES_SCHEMA, check_metadata=False)
    assert version.index().schema.equals(GAMES_SCHEMA, check_metadata=False)
    index = version.index().to_pylist()
    assert [row["game_id"] for row in index] == [game_id] and game_id.startswith("rollout-")
    assert index[0]["first_frame"] == seed["seed_start"] and index[0]["num_rows"] == 660
    assert version.manifest.counts.written == 1 and version.manifest.source == "world-model-rollout"
    table = version.window(game_id, seed["seed_start"], 660)
    assert table.column("frame").to_pylist() == list(range(seed["seed_start"], seed["seed_start"] + 660))
    assert table.column("p0").combine_chunks().field("nana").null_count == 660
    back = featurize(table)
    valid = r.features["cont_valid"]
    assert (back["cont_valid"] == valid).all()
    assert np.allclose(back["cont"][valid], r.features["cont"][valid], rtol=1e-6, atol=1e-6)
    for key in ("binary", "binary_valid", "cat", "ctrl"):
        assert (back[key] == r.features[key]).all(), key
    # the seed frames are the real game's, for every carried field
    real = featurize(frames_version.window(seed["game"]["game_id"], seed["seed_start"], 60))
    assert (back["cat"][:60] == real["cat"]).all() and (back["ctrl"][:60] == real["ctrl"]).all()


def test_drift_of_real_frames_against_themselves_is_zero(frames_version):
    game = _games(frames_version)[GAMES[1]]
    real = featurize(frames_version.window(game["game_id"], game["first_frame"] + 200, 300))
    row = drift(real, real, 300)
    assert (row.frames, row.position_mae, row.percent_mae, row.action_acc, row.stocks_acc) == (300, 0, 0, 1, 1)
    still = copy_last_frame(real, 360)  # a game where nothing moves: its last frame held
    seed, rest = {k: v[:60] for k, v in still.items()}, {k: v[60:] for k, v in still.items()}
    assert drift(copy_last_frame(seed, 300), rest, 60, "copy last frame").position_mae == 0
    assert drift(copy_last_frame(real, 300), real, 60).position_mae > 0  # the real game moves


def test_cli_publishes_the_rollout_and_prints_drift(frames_version, tmp_path, capsys):
    from shards_schema.reader import open_version

    game = _games(frames_version)[GAMES[PICHU]]
    main(["--tiny", "--shards", str(frames_version.path), "--out", str(tmp_path), "--game-id", game["game_id"],
          "--seed-frames", "60", "--frames", "300", "--torch-threads", "1"])
    lines = capsys.readouterr().out.strip().splitlines()
    version = open_version(lines[-1])
    (row,) = version.index().to_pylist()
    assert row["num_rows"] == 360 and row["stage"] == 32 and row["input_id"].startswith(game["game_id"])
    table = [line.split() for line in lines if line.startswith(("world model", "copy last frame"))]
    assert len(table) == 4
    for cells in table:
        horizon, frames, position, percent, action, stocks = (float(c) for c in cells[-6:])
        assert frames == horizon and all(math.isfinite(v) and v >= 0 for v in (position, percent, action, stocks))
        assert action <= 1 and stocks <= 1
    # the same command again finds the same version (deterministic names, nothing overwritten)
    main(["--tiny", "--shards", str(frames_version.path), "--out", str(tmp_path), "--game-id", game["game_id"],
          "--seed-frames", "60", "--frames", "300", "--torch-threads", "1"])
    assert capsys.readouterr().out.strip().splitlines()[-1] == lines[-1]
    shutil.rmtree(Path(lines[-1]))


def test_env_plays_100_random_steps(frames_version):
    env = MeleeWorldEnv(_tiny(), frames_version, seed_frames=30, max_frames=80)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    again, info_again = env.reset(seed=0)
    assert info_again["seed_start"] == info["seed_start"] and all((again[k] == obs[k]).all() for k in obs)
    env.action_space.seed(0)
    steps, episodes = 0, 1
    while steps < 100:
        obs, (r0, r1), terminated, truncated, info = env.step(env.action_space.sample())
        steps += 1
        assert env.observation_space.contains(obs)
        assert math.isfinite(r0) and r0 == -r1
        assert r0 == zero_sum_reward(info["outcome"], env.reward_per_percent)
        assert all(high >= p for high, p in zip(info["outcome"].highs, info["percent"], strict=True))
        assert all(0 <= s <= 4 for s in info["stocks"]) and all(0 <= p <= 999.001 for p in info["percent"])
        if terminated or truncated:
            with pytest.raises(RuntimeError):
                env.step(env.action_space.sample())
            env.reset()
            episodes += 1
    assert episodes >= 2  # max_frames=80 truncates within 100 steps
    env.close()


def test_env_reward_counts_damage_and_stocks(frames_version):
    env = MeleeWorldEnv(_tiny(), frames_version, seed_frames=30)
    game = _games(frames_version)[GAMES[PICHU]]
    before = Frame.at(load_seed(frames_version, game["game_id"], game["first_frame"] + 400, 2), -1)
    after = Frame.at({k: v[None] for k, v in before.__dict__.items()}, 0)
    after.cont[CONT_INDEX["p1.percent"]] += 0.12  # p0 dealt 12%
    highs = (before.value("p0.percent"), before.value("p1.percent"))
    assert zero_sum_reward(frame_outcome(highs, before, after), env.reward_per_percent) == pytest.approx(0.12)
    after.cat[CAT_INDEX["p0.stocks"]] -= 1  # and lost a stock
    assert zero_sum_reward(frame_outcome(highs, before, after), env.reward_per_percent) == pytest.approx(0.12 - 1.0)
    assert game_row(frames_version, "first")["game_id"] in {g["game_id"] for g in _games(frames_version).values()}


def test_non_null_argmax_equals_the_plain_loop():
    torch.manual_seed(0)
    logits = [torch.randn(1, 1, classes) for _, classes in CAT_FIELDS]
    logits[3][..., 0] = 100.0  # null most likely: the non-null choice must still be found
    plain = torch.stack([x[0, 0, 1:].argmax() + 1 for x in logits])
    assert (non_null_argmax(logits) == plain).all()


def test_priming_then_step_equals_one_forward_pass(frames_version):
    """The first generated frame equals what one forward pass over all seed frames (the last one with the first
    generated frame's controllers) predicts, after the same rules: the controllers line up with their frames."""
    from models.world_model import FrameState, Prediction

    model = _tiny()
    game = _games(frames_version)[GAMES[1]]
    full = featurize(frames_version.window(game["game_id"], game["first_frame"] + 300, 41))
    seed = load_seed(frames_version, game["game_id"], game["first_frame"] + 300, 40)
    sim = WorldModelSim(model, seed)
    first = sim.advance(full["ctrl"][40])
    with torch.no_grad():
        states = FrameState(**{k: torch.as_tensor(seed[k])[None] for k in ("cont", "binary", "cat", "cont_valid")})
        pred, _ = model(states, torch.as_tensor(full["ctrl"][1:41])[None], torch.full((1, 40), game["stage"]))
        last = Prediction(cont_delta=pred.cont_delta[:, -1:], binary_logits=pred.binary_logits[:, -1:],
                          cat_logits=[x[:, -1:] for x in pred.cat_logits])
        guess = last.next_state(Frame.at(seed, -1).state())
    proposed = Frame(cont=guess.cont[0, 0].numpy(), cont_valid=seed["cont_valid"][-1],
                     binary=guess.binary[0, 0].numpy(), binary_valid=seed["binary_valid"][-1],
                     cat=guess.cat[0, 0].numpy())
    expected = apply_rules(Frame.at(seed, -1), proposed, non_null_argmax(last.cat_logits).numpy(), sim.rules)
    assert np.allclose(first.cont, expected.cont, atol=1e-5) and (first.cat == expected.cat).all()
    assert (first.binary == expected.binary).all()
