"""Offline RL training on Ray Train: a 2-worker CPU smoke run on pipeline shards, and exact resume."""

from __future__ import annotations

import csv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import older_minor_copy

from models.pokemon_policy import PokemonPolicy, PolicyConfig
from pipelines.pokemon.observation import vocabulary
from shards_schema.pokemon import NUM_MOVES, NUM_SWITCHES
from shards_schema.reader import open_version
from training.checkpoints import read_checkpoint
from training.pokemon.offline_rl import OBJECTIVES, PolicyRecipe, TrainConfig, compute_losses, label_actions, run
from training.pokemon.windows import COLUMNS, LoadTurnWindows, load_window_reference, window_specs
from training.windows import VERSION_COLUMN, open_shards


def _losses(out):
    with open(out / "metrics.csv") as fh:
        return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(fh)}


SMOKE_OBJECTIVES = ("bc", "filtered_bc")
SMOKE_CRITICS = {"bc": "td", "filtered_bc": "mc"}  # the Monte Carlo targets' returns through Ray Train's workers too


@pytest.fixture(scope="module")
def smoke_runs(tiny_generated, tmp_path_factory):
    """A 2-worker run of each smoke objective, the two side by side (the second from a thread: Ray Train's fit()
    takes its SIGINT handler in the main thread only), as most of a tiny run is its actors' start-up; each in its own
    folder. Objective -> (config, run folder, Ray Train's result, or the exception its run raised)."""
    _, published, _ = tiny_generated
    root = tmp_path_factory.mktemp("smoke")
    configs = {objective: TrainConfig.tiny(shards=str(published.path), out=str(root / objective), num_workers=2,
                                           objective=objective, cpus_per_worker=0.25, validation_share=0.3,
                                           eval_every=6, critic_target=SMOKE_CRITICS[objective])
               for objective in SMOKE_OBJECTIVES}

    def attempt(cfg):
        try:
            return run(cfg)
        except Exception as err:  # noqa: BLE001 - handed to that objective's test, which raises it
            return err

    with ThreadPoolExecutor(1) as pool:
        first, *others = SMOKE_OBJECTIVES
        beside = {objective: pool.submit(attempt, configs[objective]) for objective in others}
        results = {first: attempt(configs[first]), **{k: f.result() for k, f in beside.items()}}
    return {objective: (configs[objective], root / objective, results[objective]) for objective in SMOKE_OBJECTIVES}


@pytest.mark.parametrize("objective", SMOKE_OBJECTIVES)
def test_two_worker_smoke(smoke_runs, objective):
    cfg, out, result = smoke_runs[objective]
    if isinstance(result, Exception):
        raise result
    losses = _losses(out)
    assert max(losses) == cfg.steps and all(v == v for v in losses.values())  # ran every step, no NaN
    assert result.checkpoint is not None
    with open(out / "eval.csv") as fh:  # rank 0 validates on the held-out battles at steps 6 and 12
        evaluated = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in evaluated] == [6, 12]
    assert all(0 < float(r["val_loss_total"]) < 100 and 0 <= float(r["val_accuracy"]) <= 1 for r in evaluated)
    assert result.metrics["val_loss_total"] == pytest.approx(float(evaluated[-1]["val_loss_total"]))


def test_validation_holds_out_whole_battles(tiny_generated):
    """Both sides of a held-out battle are held out; training and validation windows split every window."""
    from shards_schema.reader import open_version
    from training.pokemon.windows import window_specs
    from training.windows import held_out

    _, published, _ = tiny_generated
    version = open_version(published.path)
    index = version.index().to_pylist()
    battles = sorted({r["battle_id"] for r in index})
    out = dict(zip(battles, held_out(battles, 0.3, seed=0), strict=True))
    assert 0 < sum(out.values()) < len(battles)
    assert list(held_out(battles, 0.3, seed=0)) == list(out.values())  # a pure function of the ids
    spans = {r["battle_id"]: [] for r in index}
    for r in index:
        spans[r["battle_id"]].append((r["file"], r["row_start"], r["row_start"] + r["num_rows"]))

    def battles_of(specs):
        found = set()
        for w in specs.to_pylist():
            found |= {b for b, rows in spans.items() if any(f == w["file"] and s <= w["row_start"] < e
                                                           for f, s, e in rows)}
        return found

    train = window_specs(version, 8, 0, validation_share=0.3, split_seed=0)
    val = window_specs(version, 8, 0, validation_share=0.3, split_seed=0, validation=True)
    assert train.num_rows + val.num_rows == window_specs(version, 8, 0).num_rows
    assert battles_of(val) == {b for b, v in out.items() if v} and not battles_of(train) & battles_of(val)


def test_a_train_share_keeps_nested_battles_and_the_same_held_out_ones(tiny_generated):
    from shards_schema.reader import open_version
    from training.pokemon.windows import window_specs

    _, published, _ = tiny_generated
    version = open_version(published.path)
    rows = {(r["file"], r["row_start"]): r["battle_id"] for r in version.index().to_pylist()}

    def battles(share):
        specs = window_specs(version, 1000, 0, validation_share=0.3, split_seed=0, train_share=share)
        return {rows[(w["file"], w["row_start"])] for w in specs.to_pylist()}  # windows of 1000 start each trajectory

    half, all_train = battles(0.5), battles(1.0)
    assert half < all_train and 0 < len(half) < len(all_train)
    assert battles(0.25) <= half
    validation = window_specs(version, 8, 0, validation_share=0.3, split_seed=0, validation=True, train_share=0.25)
    assert validation.equals(window_specs(version, 8, 0, validation_share=0.3, split_seed=0, validation=True))


def test_resume_is_exact(tiny_generated, tmp_path):
    _, published, _ = tiny_generated
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    # the uninterrupted run beside the other two, from a thread (Ray Train's fit() takes its SIGINT handler in the
    # main thread only): most of a tiny run is its actors' start-up. Each records under its own folder.
    with ThreadPoolExecutor(1) as pool:
        uninterrupted = pool.submit(run, TrainConfig.tiny(shards=str(published.path), out=str(straight), steps=12,
                                                          log_every=1))
        run(TrainConfig.tiny(shards=str(published.path), out=str(resumed), steps=8, log_every=1))
        run(TrainConfig.tiny(shards=str(published.path), out=str(resumed), steps=12, log_every=1, resume=True))
        uninterrupted.result()
    a, b = _losses(straight), _losses(resumed)
    assert [round(a[s], 6) for s in range(9, 13)] == [round(b[s], 6) for s in range(9, 13)]


def test_checkpoint_plays_real_battles(slot_checkpoint):
    """A trained checkpoint loads as a poke-env player and finishes real battles on a local server; trained with the
    slot action head, which the checkpoint's config carries to the player (conftest's ``slot_checkpoint``: 4 steps
    of ``TrainConfig.tiny``, shared with self-play's fine-tune test)."""
    import shutil

    if shutil.which("node") is None:
        pytest.skip("Node.js is needed for the server")
    from training.pokemon.evaluate import EvalConfig, wilson_interval
    from training.pokemon.evaluate import run as evaluate
    from training.pokemon.showdown_server import free_port

    checkpoint = Path(slot_checkpoint) / "state.pt"
    assert read_checkpoint(str(checkpoint)).step == 4  # trained, not as initialised
    assert read_checkpoint(str(checkpoint)).build_config().action_head == "slots"
    logs = []
    rows = evaluate(EvalConfig.tiny(checkpoint=str(checkpoint), port=free_port(), battles=3), log=logs.append)
    assert rows[0]["battles"] == 3 and rows[0]["opponent"] == "random"
    assert rows[0]["fallback_moves"] == 0  # every decision came from the policy
    assert 0.0 <= rows[0]["ci_low"] <= rows[0]["win_rate"] <= rows[0]["ci_high"] <= 1.0
    low, high = wilson_interval(85, 100)
    assert 0.76 < low < 0.80 and 0.90 < high < 0.92


def test_window_gather_matches_reference(tiny_generated):
    """The loader's one-gather fast path builds the same padded windows as the per-window Arrow reference."""
    import numpy as np

    from shards_schema.reader import open_version
    from training.pokemon.windows import COLUMNS, LoadTurnWindows, load_window_reference, window_specs

    _, published, _ = tiny_generated
    version = open_version(published.path)
    context = 8
    specs = window_specs(version, context, seed=3).to_pylist()
    assert any(s["num_rows"] < context for s in specs)  # some windows are padded
    batch = {k: np.array([s[k] for s in specs]) for k in ("file", "row_start", "num_rows")}
    batch["window"] = np.arange(len(specs))
    fast = LoadTurnWindows(str(published.path), context)(batch)
    tables = {f: version.read_table(f, COLUMNS) for f in set(batch["file"])}
    for i, spec in enumerate(specs):
        ref = load_window_reference(tables[spec["file"]], spec["row_start"], spec["num_rows"], context)
        for key, value in ref.items():
            assert fast[key][i].dtype == value.dtype and np.array_equal(fast[key][i], value), (key, i)


def test_loaded_returns_are_each_trajectorys_own(tiny_generated):
    """With discount factors, every loaded turn carries its trajectory's return to the end (the reference loop over
    that trajectory's rewards read from the shard), whichever window it falls in; a winner's first decision gets
    γ^(n-2) for its n rows (the result is the closing row's reward), a loser's the negative."""
    import numpy as np

    from shards_schema.reader import open_version
    from training.pokemon.windows import LoadTurnWindows, window_specs
    from training.returns import discounted_returns_reference

    _, published, _ = tiny_generated
    version = open_version(published.path)
    gammas, context = (0.9, 0.999), 8
    specs = window_specs(version, context, seed=1)
    batch = {k: specs.column(k).to_numpy(zero_copy_only=False) for k in specs.column_names}
    batch["window"] = np.arange(specs.num_rows)
    loaded = LoadTurnWindows(str(published.path), context, gammas=gammas)(batch)
    expected = {}
    for row in version.index().to_pylist():
        rewards = version.read_table(row["file"], ["reward"]).column("reward").to_numpy()
        own = discounted_returns_reference(rewards[row["row_start"]:row["row_start"] + row["num_rows"]], gammas)
        for k in range(row["num_rows"]):
            expected[(row["file"], row["row_start"] + k)] = own[k]
        if row["result"] in ("win", "loss") and row["num_rows"] > 1:
            sign = 1.0 if row["result"] == "win" else -1.0
            np.testing.assert_allclose(own[0], sign * np.power(gammas, row["num_rows"] - 2))
    checked = 0
    for i in range(specs.num_rows):
        for k in range(int(batch["num_rows"][i])):
            np.testing.assert_allclose(loaded["returns"][i, k],
                                       expected[(str(batch["file"][i]), int(batch["row_start"][i]) + k)], rtol=1e-6)
            checked += 1
        assert not loaded["returns"][i, int(batch["num_rows"][i]):].any()  # padding
    assert checked == sum(r["num_rows"] for r in version.index().to_pylist())
    assert "returns" not in LoadTurnWindows(str(published.path), context)(batch)


def test_tokens_outside_the_vocabulary_are_refused_by_the_loader(tiny_generated):
    """The vocabulary check runs where shards are decoded, naming the id; the forward pass no longer checks."""
    import numpy as np

    from shards_schema.reader import open_version
    from training.pokemon.windows import LoadTurnWindows, window_specs

    _, published, _ = tiny_generated
    specs = window_specs(open_version(published.path), 8, seed=0).slice(0, 4)
    batch = {k: specs.column(k).to_numpy(zero_copy_only=False) for k in ("file", "row_start", "num_rows")}
    batch["window"] = np.arange(4)
    LoadTurnWindows(str(published.path), 8, vocab_size=1 << 20)(batch)
    with pytest.raises(ValueError, match="vocabulary"):
        LoadTurnWindows(str(published.path), 8, vocab_size=3)(batch)


def test_window_loader_memory_is_bounded(tiny_generated):
    """With room for one shard only, the loader evicts and re-decodes, and the batches stay the same."""
    import numpy as np

    from shards_schema.reader import open_version
    from training.pokemon.windows import LoadTurnWindows, window_specs

    _, published, _ = tiny_generated
    specs = window_specs(open_version(published.path), 8, seed=0)
    batch = {k: specs.column(k).to_numpy(zero_copy_only=False) for k in specs.column_names}
    batch["window"] = np.arange(specs.num_rows)
    roomy = LoadTurnWindows(str(published.path), 8)(batch)
    tight = LoadTurnWindows(str(published.path), 8, max_cached_bytes=1)(batch)
    for key in roomy:
        assert np.array_equal(roomy[key], tight[key])

    class Counting(LoadTurnWindows):  # shards of 800 bytes each, decoded on demand and counted
        decoded: list[str] = []

        def _decode(self, file, number=0):
            self.decoded.append(file)
            return {"x": np.full(100, ord(file), np.int64)}

    loader = Counting(str(published.path), 8, max_cached_bytes=1700)  # room for two shards
    for file in "abacab":
        assert loader._shard(file)["x"][0] == ord(file)
    assert Counting.decoded == ["a", "b", "c", "b"]  # c evicts b (least recently used), so b is decoded again
    assert loader._cached_bytes <= 1700


def _all_windows(version_path: str, context: int) -> dict:
    """Every window of a version (seed 3), as spec columns a loader takes."""
    specs = window_specs(open_version(version_path), context, seed=3)
    batch = {k: specs.column(k).to_numpy(zero_copy_only=False) for k in ("file", "row_start", "num_rows")}
    batch["window"] = np.arange(specs.num_rows)
    return batch


def test_teacher_labels_gather_like_the_reference(teacher_generated):
    """The fast path decodes a labelled version's teacher_action as the reference does: tera moves folded onto their
    moves, padding and unlabelled turns -1."""
    _, published = teacher_generated
    version, context = open_version(published.path), 8
    batch = _all_windows(str(published.path), context)
    fast = LoadTurnWindows(str(published.path), context)(batch)
    tables = {f: version.read_table(f, COLUMNS) for f in set(batch["file"])}
    for i in range(len(batch["window"])):
        ref = load_window_reference(tables[batch["file"][i]], batch["row_start"][i], batch["num_rows"][i], context)
        for key, value in ref.items():
            assert fast[key][i].dtype == value.dtype and np.array_equal(fast[key][i], value), (key, i)
    labelled = fast["teacher_action"][fast["teacher_action"] >= 0]
    assert labelled.size > 20 and labelled.max() < NUM_MOVES + NUM_SWITCHES
    assert set(fast["teacher_action"][~fast["valid"]]) <= {-1}


def test_a_version_made_before_teacher_action_loads_unlabelled(tiny_generated, tmp_path):
    """A 2.0.0 version has no teacher_action column: the loader reads it as -1 on every turn, the rest as the same
    rows with the column."""
    _, published, _ = tiny_generated
    old = older_minor_copy(published.path, tmp_path / published.path.name, "2.0.0")
    batch = _all_windows(str(published.path), 8)
    new, before = LoadTurnWindows(str(published.path), 8)(batch), LoadTurnWindows(str(old), 8)(batch)
    assert set(before) == set(new) and np.all(before["teacher_action"] == -1)
    for key in set(new) - {"teacher_action"}:
        assert np.array_equal(before[key], new[key]), key


def test_an_unlabelled_2_0_0_version_trains_beside_a_labelled_one(tiny_generated, teacher_generated, tmp_path):
    """``--shards`` a version made before teacher_action, ``--extra-shards`` a labelled one: each window reads its
    own version's labels, -1 throughout the old one."""
    _, unlabelled, _ = tiny_generated
    _, labelled = teacher_generated
    paths = [str(older_minor_copy(unlabelled.path, tmp_path / unlabelled.path.name, "2.0.0")), str(labelled.path)]
    specs = window_specs(open_shards(paths), 8, seed=0)
    batch = {k: specs.column(k).to_numpy(zero_copy_only=False) for k in specs.column_names}
    batch["window"] = np.arange(specs.num_rows)
    loaded = LoadTurnWindows(paths, 8)(batch)
    old = batch[VERSION_COLUMN] == 0
    assert old.any() and np.all(loaded["teacher_action"][old] == -1)
    assert (loaded["teacher_action"][~old] >= 0).sum() > 20


def _hand_batch():
    """Two windows of four turns: the actions taken, a teacher's labels on some turns, every action legal."""
    torch.manual_seed(0)
    b, t = 2, 4
    action = torch.tensor([[2, 5, -1, 3], [0, 1, 7, -1]])
    teacher = torch.tensor([[-1, 1, 4, 3], [-1, -1, 6, -1]])
    return {"tokens": torch.randint(2, 50, (b, t, 87), dtype=torch.int32), "numeric": torch.rand(b, t, 50),
            "legal": torch.ones(b, t, NUM_MOVES + NUM_SWITCHES, dtype=torch.bool),
            "valid": torch.ones(b, t, dtype=torch.bool), "action": action, "teacher_action": teacher,
            "reward": torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, -1.0]]),
            "done": torch.tensor([[False, False, False, True], [False, False, False, True]])}


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_the_teacher_label_is_imitated_where_present_and_the_action_where_not(objective):
    """``--label teacher``: the actor's loss, accuracy and turns are those of the action taken replaced by the
    teacher's label where there is one; the critic's are those of the action taken. ``--label action`` reads no
    teacher_action."""
    batch = _hand_batch()
    merged = torch.tensor([[2, 1, 4, 3], [0, 1, 6, -1]])
    assert torch.equal(label_actions(batch, "teacher"), merged)
    numpy_batch = {k: v.numpy() for k, v in batch.items()}  # what PolicyRecipe.samples counts: the loader's arrays
    assert np.array_equal(label_actions(numpy_batch, "teacher"), merged.numpy())
    assert label_actions(batch, "action") is batch["action"]
    model = PokemonPolicy(PolicyConfig.preset("tiny", len(vocabulary()))).eval()
    gammas = torch.tensor(model.cfg.gammas)
    on_action = TrainConfig.tiny(shards="-", out="-", objective=objective)
    on_teacher = TrainConfig.tiny(shards="-", out="-", objective=objective, label="teacher")
    with torch.no_grad():
        _, actor, critic, accuracy, turns = compute_losses(model, batch, on_teacher, gammas)
        _, actor_merged, _, accuracy_merged, turns_merged = compute_losses(model, {**batch, "action": merged},
                                                                           on_action, gammas)
        total_plain, actor_plain, critic_plain, accuracy_plain, turns_plain = compute_losses(model, batch, on_action,
                                                                                             gammas)
        untaught = {k: v for k, v in batch.items() if k != "teacher_action"}
        assert [x.item() for x in compute_losses(model, untaught, on_action, gammas)] == [
            x.item() for x in (total_plain, actor_plain, critic_plain, accuracy_plain, turns_plain)]
    assert torch.equal(actor, actor_merged) and torch.equal(accuracy, accuracy_merged)
    assert turns.item() == turns_merged.item() == 7 and turns_plain.item() == 6  # the teacher labelled a -1 turn
    assert torch.equal(critic, critic_plain)
    assert not torch.equal(actor, actor_plain)


@pytest.mark.parametrize("objective", ["filtered_bc", "exp_adv"])
def test_the_critic_warmup_trains_the_actor_by_bc_then_by_the_objective(objective):
    """``--critic-warmup-steps N``: steps 0..N-1 give the actor BC's loss, step N and validation (no step) the
    objective's weighted loss; the critic's loss is the same either way."""
    batch = _hand_batch()
    model = PokemonPolicy(PolicyConfig.preset("tiny", len(vocabulary()))).eval()
    gammas = torch.tensor(model.cfg.gammas)
    cfg = TrainConfig.tiny(shards="-", out="-", objective=objective, exp_beta=0.05, critic_warmup_steps=3)
    bc = TrainConfig.tiny(shards="-", out="-", objective="bc")
    with torch.no_grad():
        _, actor_bc, critic_bc, _, _ = compute_losses(model, batch, bc, gammas)
        during = [compute_losses(model, batch, cfg, gammas, step) for step in (0, 2)]
        after, validation = compute_losses(model, batch, cfg, gammas, 3), compute_losses(model, batch, cfg, gammas)
    for _, actor, critic, _, _ in during:
        assert torch.equal(actor, actor_bc) and torch.equal(critic, critic_bc)
    assert torch.equal(after[1], validation[1]) and torch.equal(after[2], critic_bc)
    assert not torch.isclose(after[1], actor_bc)  # the weights are not all 1 on this batch


def test_critic_warmup_steps_is_checked():
    with pytest.raises(ValueError, match="--critic-warmup-steps"):
        TrainConfig.tiny(shards="-", out="-", critic_warmup_steps=13)  # tiny runs 12 steps
    with pytest.raises(ValueError, match="--critic-warmup-steps"):
        TrainConfig.tiny(shards="-", out="-", critic_warmup_steps=-1)


def test_label_is_checked():
    with pytest.raises(ValueError, match="--label must be one of"):
        TrainConfig.tiny(shards="-", out="-", label="expert")


def test_label_teacher_needs_labelled_shards(tiny_generated, teacher_generated):
    _, unlabelled, _ = tiny_generated
    cfg = TrainConfig.tiny(shards=str(unlabelled.path), out="-", label="teacher")
    with pytest.raises(ValueError, match="no row of .* has a teacher_action.*--p1-teacher"):
        PolicyRecipe.make_plan(cfg, open_version(unlabelled.path))
    _, labelled = teacher_generated
    assert PolicyRecipe.make_plan(TrainConfig.tiny(shards=str(labelled.path), out="-", label="teacher"),
                                  open_version(labelled.path))["vocab_size"] > 0


def test_a_run_imitates_the_teacher(teacher_generated, tmp_path):
    """A tiny run with ``--label teacher`` on labelled shards trains every step, as a user runs it."""
    _, published = teacher_generated
    cfg = TrainConfig.tiny(shards=str(published.path), out=str(tmp_path / "dagger"), label="teacher", steps=4,
                           checkpoint_every=4, sides=["p1"])
    result = run(cfg)
    assert result.error is None
    losses = _losses(tmp_path / "dagger")
    assert max(losses) == 4 and all(v == v for v in losses.values())
    assert read_checkpoint(result.checkpoint.path).train_config["label"] == "teacher"


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_an_own_critic_trunk_learns_from_the_critic_loss_alone(objective):
    """``--critic-trunk own --critic-context 1``: the recipe builds the critic its own one-turn trunk, and of the
    objective's loss only the critic's term reaches it (the advantage weights are constants to the actor's)."""
    cfg = TrainConfig.tiny(shards="-", out="-", objective=objective, critic_target="td", critic_trunk="own",
                           critic_context=1)
    model_config = PolicyRecipe(cfg, {"vocab_size": len(vocabulary())}).model_config()
    assert (model_config.critic_trunk, model_config.critic_context) == ("own", 1)
    model = PokemonPolicy(model_config)
    _, actor, critic, _, _ = compute_losses(model, _hand_batch(), cfg, torch.tensor(model_config.gammas), step=5)
    actor.backward(retain_graph=True)
    assert all(p.grad is None for p in model.critic_trunk.parameters())
    critic.backward()
    assert all(p.grad is not None for p in model.critic_trunk.parameters())


def test_critic_context_needs_an_own_critic_trunk():
    with pytest.raises(ValueError, match="--critic-context .* --critic-trunk own"):
        TrainConfig.tiny(shards="-", out="-", critic_context=1)
    with pytest.raises(ValueError, match="--critic-trunk must be one of"):
        TrainConfig.tiny(shards="-", out="-", critic_trunk="separate")


def test_the_advantage_of_a_return_target_and_a_zero_baseline_by_hand():
    """A = target - baseline: the critic's Q of the action or the decision's own return, minus the policy's V, the
    best legal Q or nothing, each per discount factor."""
    from types import SimpleNamespace

    from training.pokemon.offline_rl import advantage, returns_gammas

    q = torch.tensor([[[[1.0, 3.0, -2.0]], [[0.5, 0.0, 4.0]]]])  # (B 1, T 2, G 1, A 3)
    out = SimpleNamespace(q_values=q, values=torch.tensor([[[1.5], [2.0]]]))
    batch = {"action": torch.tensor([[0, 2]]), "legal": torch.tensor([[[True, True, False], [True, True, True]]]),
             "returns": torch.tensor([[[0.25], [-1.0]]])}
    expect = {("q", "mean"): [-0.5, 2.0], ("q", "max"): [-2.0, 0.0], ("q", "zero"): [1.0, 4.0],
              ("return", "mean"): [-1.25, -3.0], ("return", "max"): [-2.75, -5.0], ("return", "zero"): [0.25, -1.0]}
    for (target, baseline), values in expect.items():
        assert advantage(out, batch, baseline, target)[0, :, 0].tolist() == values, (target, baseline)
    model_config = PolicyConfig.preset("tiny", 50)
    on_returns = TrainConfig.tiny(shards="-", out="-", objective="exp_adv", advantage_target="return")
    assert returns_gammas(on_returns, model_config) == model_config.gammas  # loaded though the critics learn TD
    assert returns_gammas(TrainConfig.tiny(shards="-", out="-"), model_config) is None


def test_a_return_target_is_refused_with_teacher_labels():
    with pytest.raises(ValueError, match="--advantage-target return .* --label teacher"):
        TrainConfig.tiny(shards="-", out="-", advantage_target="return", label="teacher")
    with pytest.raises(ValueError, match="--advantage-target must be one of"):
        TrainConfig.tiny(shards="-", out="-", advantage_target="value")
