"""Shared fixtures: one local Ray per test session, shared sample data, a tiny generated shard version."""

from __future__ import annotations

import ipaddress
import os
import random
import secrets
import shutil
import sys
import zipfile
from pathlib import Path

import psutil
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
# Ray Train's controller polls its workers this often (default 2 s): a run's end, and a killed worker, are seen that
# much sooner (a tiny run: 13-17 s instead of 28-31 s side by side in one session)
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
# The local S3 server's keys (not secrets), set before any Ray starts: as on a real node, workers take credentials
# from the environment their raylet started with, and jobs hand them only the store's endpoint and region
# (shards_schema.storage.LOCATION_VARS), which the `s3_server` fixture sets once its port is known.
os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")

from pipelines.archives import iter_path  # noqa: E402 - after the checkout is put first on sys.path above


def shared_data(*parts: str) -> Path:
    """A path under ../shared/data, or skip the test when the shared folder is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not available")
    return path


def archive_rows(path, root, replay_suffixes: tuple[str, ...]) -> dict[str, tuple]:
    """input id → (bytes, read error, filter reason) of the shared archive reader, in the order read (each id once)."""
    rows = {}
    for m in iter_path(str(path), str(root), replay_suffixes):
        assert m.input_id not in rows, f"{m.input_id} read twice"
        rows[m.input_id] = (m.data, m.read_error, m.filter_reason)
    return rows


def write_zip(path, members: dict[str, bytes], compression=zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


class CutFile:
    """A random-access store file whose reads fail past ``limit`` bytes (a store that stops answering)."""

    def __init__(self, data: bytes, limit: int):
        self.data, self.limit, self.at = data, limit, 0

    def read(self, size: int = -1) -> bytes:
        if self.at >= self.limit:
            raise OSError("AWS Error NETWORK_CONNECTION: curlCode: 56, Failure when receiving data from the peer")
        size = len(self.data) - self.at if size is None or size < 0 else size
        chunk = self.data[self.at:min(self.at + size, self.limit)]
        self.at += len(chunk)
        return chunk

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.at = offset if whence == 0 else len(self.data) + offset if whence == 2 else self.at + offset
        return self.at

    def tell(self) -> int:
        return self.at

    def close(self) -> None:
        pass


def damaged_copies(data: bytes, seed, count: int, max_changes: int):
    """``count`` seeded copies of ``data`` with 1 to ``max_changes`` bytes overwritten; every fourth is also cut
    short. The fuzz tests of inputs that must give rows or typed errors, never another exception."""
    rng = random.Random(seed)
    for trial in range(count):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, max_changes)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        if trial % 4 == 0:
            damaged = damaged[:rng.randrange(len(damaged))]
        yield bytes(damaged)


def simulator_missing() -> str | None:
    """Why the Pokémon Showdown simulator cannot run here, or None when it can: it needs Node.js on PATH and the
    pinned pokemon-showdown package (``make setup``; a clone without them still runs everything else)."""
    if shutil.which("node") is None:
        return "Node.js is needed to run the Pokémon Showdown simulator (`make setup`)"
    from pipelines.pokemon.dex import showdown_dir

    try:
        showdown_dir()
    except FileNotFoundError as err:
        return str(err)
    return None


needs_simulator = pytest.mark.skipif(simulator_missing() is not None, reason=str(simulator_missing()))
"""Skips a test (or, as ``pytestmark``, a module) that runs the simulator or a Showdown server where it cannot."""

# The tiers (pyproject.toml registers the markers; README, "Test tiers"): each test is marked by the fixtures it uses,
# so a new test that takes one is in its tier without a decorator. ``item.fixturenames`` holds every fixture a test
# needs, also through other fixtures (``tiny_generated`` -> ``ray_local``).
RAY_FIXTURES = {"ray_local", "ray_head", "cluster"}
"""Start or use a Ray: the session's local one, test_job_submit's head, test_cluster_s3's two nodes."""
CLUSTER_FIXTURES = {"ray_head", "cluster"}
"""Start Ray nodes of their own (`ray start`, tests/ray_nodes.py) beside the session's."""
SIMULATOR_FIXTURES = {"tiny_generated", "teacher_generated", "gen2_battles"}
"""Run the Pokémon Showdown simulator (Node.js), as do the tests and modules marked ``needs_simulator``."""
STARTS_RAY_ITSELF = ("test_security_ray.py::test_local_job_listens_on_loopback_and_refuses_calls_without_the_token",)
"""Tests that start a Ray in a process of their own, which no fixture tells (a decorator where the file allows)."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = set(item.fixturenames)
        if fixtures & RAY_FIXTURES or item.nodeid.split("/")[-1].startswith(STARTS_RAY_ITSELF):
            item.add_marker(pytest.mark.ray)
        if fixtures & CLUSTER_FIXTURES:
            item.add_marker(pytest.mark.cluster)
            # with the nodes' start and end, the lightest (test_cluster_s3's probe) took 22 s on 2 cores
            item.add_marker(pytest.mark.slow)
        if fixtures & SIMULATOR_FIXTURES or any(m is needs_simulator.mark for m in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.simulator)


@pytest.fixture(scope="session")
def ray_local():
    from pipelines.ray_start import start_ray

    start_ray(num_cpus=2, log_to_driver=False)
    import ray

    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def synthetic_frames(ray_local, tmp_path_factory):
    """A melee_frames version of 2 synthetic games (no ../shared needed), parsed once for every self-play and sweep
    test that reads it."""
    from pipelines.parse_replays import ParseConfig
    from pipelines.parse_replays import run as parse

    return parse(ParseConfig.tiny(source="slp", out=str(tmp_path_factory.mktemp("melee")), num_battles=2),
                 log=lambda *_: None).path


@pytest.fixture(scope="session")
def three_synthetic_games(ray_local, tmp_path_factory):
    """A melee_frames version of 3 synthetic games, parsed once for the tests that hold one out and train on the
    others (a validation share of 0.2 or 0.3 rounds to one game; a train share of 0.5 keeps one of the two left): the
    world model's synthetic smoke tests, the scaling sweep and the notebooks."""
    from pipelines.parse_replays import ParseConfig
    from pipelines.parse_replays import run as parse

    published = parse(ParseConfig.tiny(source="slp", out=str(tmp_path_factory.mktemp("melee3")), num_battles=3),
                      log=lambda *_: None)
    assert published.manifest.counts.trajectories == 3
    return published.path


@pytest.fixture(scope="session")
def tiny_generated(ray_local, tmp_path_factory):
    """A published shard version of a few simulator battles per format (the tiny preset); skipped without the
    simulator."""
    if reason := simulator_missing():
        pytest.skip(reason)
    from pipelines.parse_replays import ParseConfig, run

    out = tmp_path_factory.mktemp("generated")
    cfg = ParseConfig.tiny(source="generated", out=str(out))
    logs: list[str] = []
    published = run(cfg, log=logs.append)
    return cfg, published, logs


TEACHER_BATTLES = 3
"""Battles of ``teacher_generated``: gen1ou, a random p1 labelled by the search player, against the heuristic."""


@pytest.fixture(scope="session")
def teacher_generated(ray_local, tmp_path_factory):
    """A published shard version whose p1 decisions a teacher labelled: ``TEACHER_BATTLES`` gen1ou battles of a
    random p1 against the heuristic, the search player as p1's teacher, parsed by the job as a user runs it
    (``--p1-teacher search``); skipped without the simulator. (config, published version)."""
    if reason := simulator_missing():
        pytest.skip(reason)
    from pipelines.parse_replays import ParseConfig, run

    cfg = ParseConfig.tiny(source="generated", out=str(tmp_path_factory.mktemp("teacher")), formats=["gen1ou"],
                           num_battles=TEACHER_BATTLES, battles_per_chunk=TEACHER_BATTLES, p1="random",
                           p2="heuristic", p1_teacher="search")
    return cfg, run(cfg, log=lambda *_: None)


def older_minor_copy(src, dest, schema_version: str):
    """A copy at ``dest`` of the local shard version ``src`` as code of an older minor of its schema wrote it: the
    columns added after ``schema_version`` (``CodeVersions.added_columns``) dropped from its shards, and its manifest
    saying ``schema_version``, with the shards' new sizes and sha256. ``dest`` (a Path)."""
    import dataclasses
    import hashlib

    import pyarrow.parquet as pq

    from shards_schema.manifest import FileEntry, Manifest
    from shards_schema.registry import dataset

    shutil.copytree(src, dest)
    manifest = Manifest.load(dest)
    absent = [c.name for c in dataset(manifest.schema_name).code.absent_columns(schema_version)]
    files = []
    for entry in manifest.files:
        path = dest / entry.path
        pq.write_table(pq.read_table(path).drop_columns(absent), path)
        data = path.read_bytes()
        files.append(FileEntry(path=entry.path, rows=entry.rows, bytes=len(data),
                               sha256=hashlib.sha256(data).hexdigest()))
    (dest / "manifest.json").write_text(
        dataclasses.replace(manifest, schema_version=schema_version, files=files).to_json())
    return dest


@pytest.fixture(scope="session")
def slot_checkpoint(tiny_generated, tmp_path_factory):
    """A tiny offline-RL checkpoint trained with the slot action head (4 steps on ``tiny_generated``'s battles), as
    ``training/pokemon/offline_rl.py --action-head slots`` writes it, trained once per session: the checkpoint a
    poke-env player plays (test_offline_rl) and the one self-play fine-tunes (test_pokemon_selfplay), which only
    read it. Its folder (a str)."""
    from training.loop import latest_checkpoint
    from training.pokemon.offline_rl import TrainConfig, run

    _, published, _ = tiny_generated
    out = tmp_path_factory.mktemp("slots")
    result = run(TrainConfig.tiny(shards=str(published.path), out=str(out), steps=4, checkpoint_every=4,
                                  action_head="slots"))
    assert result.error is None
    return str(latest_checkpoint(out))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """An S3-compatible server (moto's server mode) on 127.0.0.1 at a free port, started and stopped by PID;
    ``AWS_ENDPOINT_URL`` and ``AWS_REGION`` point this session at it (the keys are set above). Yields its endpoint."""
    pytest.importorskip("moto", reason="moto[server] (the dev extra) runs the local S3 server")
    from tools.local_s3 import LocalS3Server

    server = LocalS3Server(tmp_path_factory.mktemp("s3") / "moto.log")
    previous = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_REGION")}
    try:
        os.environ.update(AWS_ENDPOINT_URL=server.endpoint, AWS_REGION="us-east-1")
        yield server.endpoint
    finally:
        server.stop()
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def s3_bucket(s3_server, request):
    """A new empty bucket on the local S3 server; yields its ``s3://`` URI."""
    import re

    bucket = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower())[:50].strip("-") + f"-{os.getpid()}"
    from tools.local_s3 import create_bucket

    create_bucket(s3_server, bucket)
    return f"s3://{bucket}"


def copy_tree(src: str, dst: str) -> None:
    """Copy every file below ``src`` to the same relative path below ``dst`` through storage (either may be a local
    folder or a URI): how tests put a published local shard version or run folder on the S3 server."""
    from shards_schema import storage

    for uri in storage.list_files(str(src)):
        storage.write_bytes(storage.join(dst, storage.relative(uri, str(src))), storage.read_bytes(uri))


def listening_sockets(pid: int) -> list[tuple[str, str, int]]:
    """(process name, host, port) of every listening TCP socket of process ``pid`` and the processes under it."""
    root = psutil.Process(pid)
    found = []
    for proc in [root] + root.children(recursive=True):
        try:
            name = proc.name()
            found += [(name, c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN]
        except psutil.NoSuchProcess:  # a worker that exited while we looked
            continue
    return found


def is_loopback(host: str) -> bool:
    """Whether a socket bound to ``host`` can be reached from this machine only."""
    ip = ipaddress.ip_address(host)
    if ip.version == 6 and ip.ipv4_mapped is not None:  # `::ffff:127.0.0.1`: an IPv6 socket bound to IPv4 loopback
        ip = ip.ipv4_mapped
    return ip.is_loopback
