"""The window scheme every trainer shares: ``cut_windows`` against a readable per-trajectory loop, and the run's
stream cut at a resume step equal to the uninterrupted stream from there."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from training.windows import cut_windows, window_stream


def _index(lengths: list[int]) -> pa.Table:
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return pa.table({"file": [f"part-{i % 3}.parquet" for i in range(len(lengths))], "row_start": starts,
                     "num_rows": np.array(lengths, np.int64), "stage": np.arange(len(lengths), dtype=np.int64)})


def _cut_reference(index: pa.Table, length: int, stride: int, seed: int, phase: int) -> list[dict]:
    """One window at a time: offsets ``first, first + stride, ...`` while the window still has a row to predict
    from (``length - stride`` rows of overlap at the end), the last one shorter; then the seeded permutation."""
    out = []
    for row in index.to_pylist():
        n = row["num_rows"]
        if n == 0:
            continue
        overlap = length - stride
        first = phase if n > phase + overlap else 0
        for offset in range(first, max(first + 1, n - overlap), stride):
            out.append({"file": row["file"], "row_start": row["row_start"] + offset,
                        "num_rows": min(length, n - offset), "stage": row["stage"]})
    order = np.random.default_rng(seed).permutation(len(out))
    return [out[i] for i in order]


@pytest.mark.parametrize("length,stride,phase", [(8, 8, 0), (33, 32, 0), (33, 32, 5), (5, 4, 3)])
def test_cut_windows_matches_the_loop(length, stride, phase):
    index = _index([1, 2, 7, 8, 9, 33, 34, 100, 0, 65, 4, 5])
    fast = cut_windows(index, length, stride, seed=11, phase=phase)
    assert fast.column_names == ["file", "row_start", "num_rows", "stage"]
    assert fast.to_pylist() == _cut_reference(index, length, stride, 11, phase)


def test_policy_windows_tile_each_trajectory():
    """With length = stride every row of every trajectory is in exactly one window."""
    index = _index([3, 8, 17])
    rows = sorted(r for w in cut_windows(index, 8, 8, seed=0).to_pylist()
                  for r in range(w["row_start"], w["row_start"] + w["num_rows"]))
    assert rows == list(range(28))


def test_the_stream_cut_at_a_resume_step_is_the_rest_of_the_uninterrupted_stream():
    index = _index([9, 20, 31, 6])

    def epoch(e: int) -> pa.Table:
        return cut_windows(index, 5, 4, seed=100 + e, phase=e % 3)

    per_epoch = epoch(0).num_rows
    straight = window_stream(epoch, 0, 5 * per_epoch)
    assert straight.column("window").to_pylist() == list(range(5 * per_epoch))
    for start in (1, per_epoch - 1, per_epoch, 2 * per_epoch + 3):
        resumed = window_stream(epoch, start, 5 * per_epoch - start)
        assert resumed.to_pylist() == straight.slice(start).to_pylist()
    # epochs differ (their own seed and phase), so a second epoch is not the first one again
    assert straight.slice(per_epoch, per_epoch).drop_columns(["window"]).to_pylist() != \
        straight.slice(0, per_epoch).drop_columns(["window"]).to_pylist()


def test_a_stream_with_no_windows_is_an_error():
    with pytest.raises(ValueError, match="no windows"):
        window_stream(lambda e: cut_windows(_index([0, 0]), 8, 8, seed=0), 0, 4)


class _Games:
    """The one method ``split_games`` reads from a version: its index."""

    def __init__(self, game_ids: list[str]):
        self.game_ids = game_ids

    def index(self) -> pa.Table:
        return pa.table({"game_id": self.game_ids})


def test_a_grown_dataset_keeps_every_game_and_battle_on_its_side():
    """Melee's games and Pokémon's battles share one split: adding data moves no earlier id across it."""
    from training.melee.windows import split_games
    from training.windows import held_out

    small = [f"game-{i}" for i in range(300)]
    grown = small + [f"game-{i}" for i in range(300, 1000)]
    train, val = split_games(_Games(small), 0.2, seed=3)
    train2, val2 = split_games(_Games(grown * 2), 0.2, seed=3)  # each game in two rows (a union of versions)
    assert set(val) <= set(val2) and set(train) <= set(train2) and not set(train2) & set(val2)
    assert set(train2) | set(val2) == set(grown) and 0.15 < len(val2) / len(grown) < 0.25
    side = dict(zip(grown, held_out(grown, 0.2, seed=3), strict=True))
    assert {g for g in grown if side[g]} == set(val2)  # the same split as the battles'


def test_each_side_keeps_a_game_when_there_are_two_or_more():
    from training.melee.windows import split_games

    for n in (2, 3, 5):
        for share in (0.01, 0.99):
            train, val = split_games(_Games([f"g{i}" for i in range(n)]), share, seed=0)
            assert train and val and len(train) + len(val) == n
    assert split_games(_Games(["only"]), 0.5, seed=0) == (["only"], [])
    assert split_games(_Games(["a", "b"]), 0.0, seed=0) == (["a", "b"], [])
