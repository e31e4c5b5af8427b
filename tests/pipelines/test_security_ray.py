"""Ray runs with token authentication for everything a user starts, and a local job's servers listen on 127.0.0.1.

Ray 2.60's GCS, raylet and core-worker servers accept connections from any interface unless the node IP is loopback
(pipelines/ray_start.py says why), so a reachable port without token auth lets anyone run code on the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REPO_ROOT, is_loopback

# One harmless read per Ray gRPC service that a local instance serves; Pull is only ever sent without a token, so
# Ray refuses it before its handler runs.
GCS_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"
PROBES = (GCS_METHOD, "/ray.rpc.NodeManagerService/GetSystemConfig", "/ray.rpc.CoreWorkerService/NumPendingTasks",
          "/ray.rpc.ReporterService/HealthCheck", "/ray.rpc.ObjectManagerService/Pull")

# The driver of a tiny local job (synthetic Slippi games): runs the job through the project's entry point, then lists
# the listening sockets of its own process and every process under it (Ray's GCS, raylet, agents, workers) and stays
# up, Ray with it, until the test closes its stdin.
DRIVER = r"""
import json, sys
import psutil
from pipelines.parse_replays import ParseConfig, run

run(ParseConfig.tiny(source="slp", out=sys.argv[1], num_cpus=1, num_parse_actors=1), log=lambda line: None)
me = psutil.Process()
sockets = []
for proc in [me] + me.children(recursive=True):
    try:
        name = proc.name()
        for conn in proc.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                sockets.append({"pid": proc.pid, "name": name, "host": conn.laddr.ip, "port": conn.laddr.port})
    except psutil.NoSuchProcess:
        continue
print("SOCKETS " + json.dumps(sockets), flush=True)
sys.stdin.readline()
"""


def _call(port: int, method: str, token: str | None = None) -> str:
    """The gRPC status of an empty request to ``method`` on 127.0.0.1:``port``, with or without the bearer token."""
    import grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    metadata = [("authorization", f"Bearer {token}")] if token else None
    try:
        channel.unary_unary(method, request_serializer=None, response_deserializer=None)(b"", timeout=5,
                                                                                          metadata=metadata)
        return "OK"
    except grpc.RpcError as err:
        return err.code().name
    finally:
        channel.close()


def _user_env(home: Path) -> dict:
    """A user's shell: no Ray auth variables set (Ray's default applies), a home of the test's own."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")}
    return {**env, "HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}


def test_local_job_listens_on_loopback_and_refuses_calls_without_the_token(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "out")], cwd=REPO_ROOT, env=_user_env(home),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(300, proc.kill)
    watchdog.start()
    try:
        sockets = None
        for line in proc.stdout:
            if line.startswith("SOCKETS "):
                sockets = json.loads(line[len("SOCKETS "):])
                break
        assert sockets is not None, proc.stderr.read()[-3000:] if proc.poll() is not None else "no socket list"
        token = (home / ".ray" / "auth_token").read_text().strip()  # Ray made it for the user: none existed
        refused: dict[str, list[int]] = {}
        for sock in sockets:
            answers = [_call(sock["port"], method) for method in PROBES]
            assert "OK" not in answers, f"{sock} answered a Ray call without the token: {answers}"
            if "UNAUTHENTICATED" in answers:
                refused.setdefault(sock["name"], []).append(sock["port"])
            else:
                # not a Ray gRPC server (HTTP agents, metrics): only tolerable where nothing outside can connect
                assert is_loopback(sock["host"]), f"{sock} listens beyond loopback and is not a Ray core server"
            assert is_loopback(sock["host"]), f"{sock}: a local job's servers listen on 127.0.0.1 only"
        assert {"gcs_server", "raylet", "python"} <= set(refused), (refused, sockets)  # the driver is "python"
        gcs_port = refused["gcs_server"][0]
        assert _call(gcs_port, GCS_METHOD, token) == "OK"  # the token opens what the probes were refused
        assert _call(gcs_port, GCS_METHOD, "0" * len(token)) == "UNAUTHENTICATED"
    finally:
        watchdog.cancel()
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("env", [{"RAY_AUTH_MODE": "disabled"},  # a local job told to run open
                                 {"RAY_AUTH_MODE": None, "RAY_ADDRESS": "127.0.0.1:6379"}],  # a cluster without it
                         ids=["local-disabled", "cluster-unset"])
def test_entry_points_refuse_ray_without_token_auth(monkeypatch, tmp_path, env):
    from pipelines.job.ray_data import init_ray
    from pipelines.parse_replays import ParseConfig
    from pipelines.ray_start import RayAuthError
    from training.loop import init_local_ray

    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    with pytest.raises(RayAuthError, match="RAY_AUTH_MODE=token"):
        init_ray(ParseConfig.tiny(source="slp", out=str(tmp_path)))
    with pytest.raises(RayAuthError, match="RAY_AUTH_MODE=token"):
        init_local_ray()


def test_cluster_nodes_start_with_token_auth_and_share_one_token():
    import yaml

    text = (REPO_ROOT / "ray_cluster.yaml").read_text()
    config = yaml.safe_load(text)
    starts = [c for c in config["head_start_ray_commands"] + config["worker_start_ray_commands"] if "ray start" in c]
    assert len(starts) == 2 and all("RAY_AUTH_MODE=token ray start" in c for c in starts), starts
    assert "RAY_AUTH_MODE=disabled" not in text
    # `ray up` copies the user's token (file_mounts: remote path -> local path) to the head and every worker
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
