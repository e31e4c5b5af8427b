"""The parse job runs unchanged under `ray job submit --working-dir .` against a local head (started and stopped
by PID, on its own ports and temp dir), with token authentication as a user runs it: `ray get-auth-token --generate`,
`RAY_AUTH_MODE=token ray start --head`, `RAY_AUTH_MODE=token ray job submit`."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import REPO_ROOT, is_loopback, listening_sockets, shared_data
from ray_nodes import RAY_BIN, start_head, stop, submit_job
from ray_nodes import http_status as _get

from shards_schema.reader import open_version


@pytest.fixture(scope="module")
def ray_head():
    temp_dir = Path(tempfile.mkdtemp(prefix="rfh", dir="/tmp"))
    home = temp_dir / "home"  # the user's ~/.ray/auth_token goes here, not into the real home
    # `python` in the job's entrypoint must be the project's interpreter, as in an activated virtualenv. The token
    # comes from the token file only (as for a user who ran `ray get-auth-token --generate`), not the session's.
    env = {**{k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")},
           "RAY_AUTH_MODE": "token", "HOME": str(home), "PATH": f"{RAY_BIN.parent}:{os.environ.get('PATH', '')}"}
    subprocess.run([str(RAY_BIN), "get-auth-token", "--generate"], env=env, check=True, capture_output=True,
                   timeout=120)
    token = (home / ".ray" / "auth_token").read_text().strip()
    try:
        head = start_head(temp_dir, env, num_cpus=2, token=token)
    except RuntimeError as err:
        shutil.rmtree(temp_dir, ignore_errors=True)
        pytest.fail(str(err))
    try:
        yield head.dashboard, env, token, head.proc.pid
    finally:
        stop(head.proc)  # this head only, by its process group; never `ray stop`
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_head_refuses_requests_without_the_token_and_listens_on_loopback(ray_head):
    address, _, token, pid = ray_head
    assert _get(f"{address}/api/jobs/", token) == 200
    assert _get(f"{address}/api/jobs/") == 401
    assert _get(f"{address}/api/jobs/", "0" * len(token)) == 403
    listening = listening_sockets(pid)
    assert listening and all(is_loopback(host) for _, host, _ in listening), listening


def test_ray_job_submit(ray_head, tmp_path):
    address, env, _, _ = ray_head
    samples = shared_data("pokemon", "metamon_parsed")
    out = tmp_path / "out"
    proc = submit_job(address, env, ["python", "pipelines/parse_replays.py", "--source", "metamon", "--input",
                                     str(samples), "--out", str(out), "--shard-size-mb", "1"], cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    published = [line for line in proc.stdout.splitlines() if line.startswith(str(out))]
    assert published, proc.stdout[-3000:]
    version = open_version(published[-1].strip())
    assert version.manifest.counts.written == 4 and version.manifest.counts.reconciles()
