"""The parse job runs unchanged under `ray job submit --working-dir .` against a local head (started and stopped
by PID, on its own ports and temp dir)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
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


@pytest.fixture(scope="module")
def ray_head():
    gcs, dash, client, agent_http, agent_grpc, metrics, rt_env, nm, om = _free_ports(9)
    worker_lo = 20000 + os.getpid() % 20000
    temp_dir = tempfile.mkdtemp(prefix="rfh", dir="/tmp")
    # `python` in the job's entrypoint must be the project's interpreter, as in an activated virtualenv
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{RAY_BIN.parent}:{os.environ.get('PATH', '')}"}
    cmd = [str(RAY_BIN), "start", "--head", "--block", f"--temp-dir={temp_dir}", f"--port={gcs}",
           "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
           "--include-dashboard=true", f"--ray-client-server-port={client}",
           f"--dashboard-agent-listen-port={agent_http}",
           f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
           f"--runtime-env-agent-port={rt_env}", f"--node-manager-port={nm}", f"--object-manager-port={om}",
           f"--min-worker-port={worker_lo}", f"--max-worker-port={worker_lo + 200}", "--num-cpus=2",
           "--disable-usage-stats"]
    log = open(Path(temp_dir) / "head.log", "w")
    head = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{address}/api/version", timeout=2)
            break
        except OSError:
            if head.poll() is not None:
                pytest.fail(f"ray head exited: {(Path(temp_dir) / 'head.log').read_text()[-2000:]}")
            time.sleep(1)
    else:
        os.killpg(head.pid, signal.SIGTERM)
        pytest.fail("ray head did not come up in 90 s")
    yield address, env
    os.killpg(head.pid, signal.SIGTERM)  # this head only, by its process group; never `ray stop`
    try:
        head.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
    log.close()
    shutil.rmtree(temp_dir, ignore_errors=True)


def test_ray_job_submit(ray_head, tmp_path):
    address, env = ray_head
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
