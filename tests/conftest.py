"""Shared fixtures: one local Ray per test session, shared sample data, a tiny generated shard version."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
sys.path.insert(0, str(REPO_ROOT))
# Token auth, as for users: Ray reads the mode once per process, at import, so it is set before anything imports ray.
# A fresh token per session, in the environment so that every Ray this session starts (the local instance below, a
# `ray start` head, an added node) shares it; nothing is written to ~/.ray.
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
os.environ.setdefault("WANDB_MODE", "offline")


def shared_data(*parts: str) -> Path:
    """A path under ../shared/data, or skip the test when the shared folder is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not available")
    return path


@pytest.fixture(scope="session")
def ray_local():
    from pipelines.ray_start import start_ray

    start_ray(num_cpus=2, log_to_driver=False)
    import ray

    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_generated(ray_local, tmp_path_factory):
    """A published shard version of a few simulator battles per format (the tiny preset)."""
    from pipelines.parse_replays import ParseConfig, run

    out = tmp_path_factory.mktemp("generated")
    cfg = ParseConfig.tiny(source="generated", out=str(out))
    logs: list[str] = []
    published = run(cfg, log=logs.append)
    return cfg, published, logs
