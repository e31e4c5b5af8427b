"""The parse job runs unchanged under `ray job submit --working-dir .` against a local head (started and stopped
by PID, on its own ports and temp dir), with token authentication as a user runs it: `ray get-auth-token --generate`,
`RAY_AUTH_MODE=token ray start --head`, `RAY_AUTH_MODE=token ray job submit`."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO_ROOT, shared_data

from shards_schema.reader import open_version

RAY_BIN = Path(sys.executable).parent / "ray"


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _get(url: str, token: str | None = None) -> int:
    """HTTP status of a GET, with or without the bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.fixture(scope="module")
def ray_head():
    gcs, dash, client, agent_http, agent_grpc, metrics, rt_env, nm, om = _free_ports(9)
    worker_lo = 20000 + os.getpid() % 20000
    temp_dir = tempfile.mkdtemp(prefix="rfh", dir="/tmp")
    home = Path(temp_dir) / "home"  # the user's ~/.ray/auth_token goes here, not into the real home
    # `python` in the job's entrypoint must be the project's interpreter, as in an activated virtualenv. The token
    # comes from the token file only (as for a user who ran `ray get-auth-token --generate`), not the session's.
    env = {**{k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")},
           "RAY_AUTH_MODE": "token", "HOME": str(home), "PATH": f"{RAY_BIN.parent}:{os.environ.get('PATH', '')}"}
    subprocess.run([str(RAY_BIN), "get-auth-token", "--generate"], env=env, check=True, capture_output=True,
                   timeout=120)
    token = (home / ".ray" / "auth_token").read_text().strip()
    cmd = [str(RAY_BIN), "start", "--head", "--block", f"--temp-dir={temp_dir}", f"--port={gcs}",
           "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
           "--include-dashboard=true", f"--ray-client-server-port={client}",
           f"--dashboard-agent-listen-port={agent_http}",
           f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
           f"--runtime-env-agent-port={rt_env}", f"--node-manager-port={nm}", f"--object-manager-port={om}",
           f"--min-worker-port={worker_lo}", f"--max-worker-port={worker_lo + 200}", "--num-cpus=2",
           "--disable-usage-stats"]
    log = open(Path(temp_dir) / "head.log", "w")
    # Ray's single-machine mode for this head alone: `--node-ip-address=127.0.0.1` is replaced by the routable IP
    # (ray._private.services.resolve_ip_for_localhost), this switch keeps every server of the head on 127.0.0.1.
    head_env = {**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    head = subprocess.Popen(cmd, env=head_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            _get(f"{address}/api/version", token)
            break
        except OSError:
            if head.poll() is not None:
                pytest.fail(f"ray head exited: {(Path(temp_dir) / 'head.log').read_text()[-2000:]}")
            time.sleep(1)
    else:
        os.killpg(head.pid, signal.SIGTERM)
        pytest.fail("ray head did not come up in 90 s")
    yield address, env, token, head.pid
    os.killpg(head.pid, signal.SIGTERM)  # this head only, by its process group; never `ray stop`
    try:
        head.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
    log.close()
    shutil.rmtree(temp_dir, ignore_errors=True)


def test_head_refuses_requests_without_the_token_and_listens_on_loopback(ray_head):
    from test_security_ray import _is_loopback, listening_sockets

    address, _, token, pid = ray_head
    assert _get(f"{address}/api/jobs/", token) == 200
    assert _get(f"{address}/api/jobs/") == 401
    assert _get(f"{address}/api/jobs/", "0" * len(token)) == 403
    listening = listening_sockets(pid)
    assert listening and all(_is_loopback(host) for _, host, _ in listening), listening


def test_ray_job_submit(ray_head, tmp_path):
    address, env, _, _ = ray_head
    samples = shared_data("pokemon", "metamon_parsed")
    out = tmp_path / "out"
    cmd = [str(RAY_BIN), "job", "submit", "--address", address, "--working-dir", ".", "--",
           "python", "pipelines/parse_replays.py", "--source", "metamon", "--input", str(samples),
           "--out", str(out), "--shard-size-mb", "1"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    published = [line for line in proc.stdout.splitlines() if line.startswith(str(out))]
    assert published, proc.stdout[-3000:]
    version = open_version(published[-1].strip())
    assert version.manifest.counts.written == 4 and version.manifest.counts.reconciles()
