"""Checkpoints are read as tensors and plain values only: one that carries a pickled callable is refused before the
callable runs, through every way in (evaluate.py, world-model play, --resume), and RNG states still resume exactly."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch


class _RunsCode:
    """What a crafted checkpoint can carry: unpickling it calls ``exec`` on the attacker's code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def _plain_state() -> dict:
    from training.checkpoints import rng_state

    return {"model": {"weight": torch.zeros(2, 2)}, "optimizer": {"state": {}, "param_groups": []}, "step": 3,
            "config": {"preset": "tiny", "context": 8}, "model_config": {"d_model": 8}, "rng": [rng_state()]}


def _loaders():
    from training.checkpoints import load_state, read_checkpoint
    from training.melee.world_model import load_model
    from training.pokemon.player import load_policy

    return {
        "load_state": lambda run: load_state(run / "state.pt"),
        "evaluate.load_policy": lambda run: load_policy(str(run / "state.pt")),
        "world_model.load_model": lambda run: load_model(run / "state.pt"),
        # the driver on --resume / --init-from, and a worker starting from them
        "--resume, --init-from": lambda run: read_checkpoint(str(run)),
    }


@pytest.mark.parametrize("way_in", list(_loaders()))
def test_a_checkpoint_carrying_a_callable_is_refused_before_it_runs(tmp_path, way_in):
    from training.checkpoints import UnsafeCheckpointError

    marker = tmp_path / "code-ran"
    run = tmp_path / "run"
    run.mkdir()
    torch.save({**_plain_state(), "extra": _RunsCode(marker)}, run / "state.pt")
    with pytest.raises(UnsafeCheckpointError, match="refused"):
        _loaders()[way_in](run)
    assert not marker.exists()


def test_a_plain_checkpoint_loads(tmp_path):
    from training.checkpoints import load_state

    torch.save(_plain_state(), tmp_path / "state.pt")
    state = load_state(tmp_path / "state.pt")
    assert state["step"] == 3 and state["config"] == {"preset": "tiny", "context": 8}
    assert torch.equal(state["model"]["weight"], torch.zeros(2, 2))


def test_rng_states_round_trip_through_a_checkpoint(tmp_path):
    from training.checkpoints import load_state, rng_state, set_rng_state

    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    np.random.normal()  # leaves a cached Gaussian in NumPy's state, which must come back too
    torch.save({"rng": [rng_state()]}, tmp_path / "state.pt")

    def draws():
        return random.random(), np.random.normal(), np.random.randint(1 << 30), torch.rand(3).tolist()

    expected = draws()
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    set_rng_state(load_state(tmp_path / "state.pt")["rng"][0])
    assert draws() == expected
