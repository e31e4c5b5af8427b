"""Ray processes for tests, started with `ray start --block` on 127.0.0.1 (own temp dir, explicit ports) and ended
by their process group, never with `ray stop` (it ends every Ray on the machine)."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

RAY_BIN = Path(sys.executable).parent / "ray"


# Ray 2.60 answers SIGTERM by draining the node for up to 30 s before it ends its processes; signalled as a process
# group, the GCS goes first and every end of a head sat out the whole 30 s ("Failed to mark the local node as draining
# on SIGTERM"). A test's node has nothing to hand over. (``stop`` now kills by SIGKILL; this still covers any SIGTERM.)
NO_DRAIN = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}


WORKER_PORTS_FROM, FREE_PORTS_FROM = 20000, 40500
"""A node's 201 worker ports start between 20000 and 39999 (``worker_ports``); its other ports are free ports from
40500 up (``free_ports``). Ray refuses to start a node whose ports overlap ("Ray component worker_ports is trying to
use a port number 34815 that is used by other components"): seen when a free port of the ephemeral range
(32768-60999) fell in the head's worker range."""


def worker_ports(offset: int) -> int:
    """The first of the 201 worker ports of a node of this process (``offset``: 0 the head, 300 a second node)."""
    return WORKER_PORTS_FROM + (os.getpid() + offset) % 20000


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports on 127.0.0.1, none in a node's worker range."""
    socks, ports = [], []
    try:
        while len(ports) < n:
            if len(socks) > 1000:
                raise RuntimeError(f"no free port from {FREE_PORTS_FROM} up on 127.0.0.1")
            socks.append(s := socket.socket())
            s.bind(("127.0.0.1", 0))
            if s.getsockname()[1] >= FREE_PORTS_FROM:
                ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def http_status(url: str, token: str | None = None) -> int:
    """HTTP status of a GET, with or without the bearer token (OSError when nothing listens)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def node_ports(worker_lo: int) -> list[str]:
    """Every port a node opens besides the head's own (GCS, dashboard, client), explicit so that two nodes on one
    machine never collide."""
    agent_http, agent_grpc, metrics, rt_env, nm, om = free_ports(6)
    return [f"--dashboard-agent-listen-port={agent_http}", f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={rt_env}",
            f"--node-manager-port={nm}", f"--object-manager-port={om}",
            f"--min-worker-port={worker_lo}", f"--max-worker-port={worker_lo + 200}"]


@dataclass
class Head:
    proc: subprocess.Popen
    dashboard: str
    """http://127.0.0.1:PORT: where `ray job submit --address` goes."""
    gcs: str
    """127.0.0.1:PORT: where `ray start --address` goes."""
    temp_dir: Path


def start_head(temp_dir: Path, env: dict[str, str], *, num_cpus: int, token: str,
               timeout_s: float = 90) -> Head:
    """`ray start --head --block` in the background, every server on 127.0.0.1; returns once the dashboard answers
    (a request with ``token``). The caller ends it with ``stop``."""
    gcs, dash, client = free_ports(3)
    worker_lo = worker_ports(0)
    cmd = [str(RAY_BIN), "start", "--head", "--block", f"--temp-dir={temp_dir}", f"--port={gcs}",
           "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
           "--include-dashboard=true", f"--ray-client-server-port={client}", *node_ports(worker_lo),
           f"--num-cpus={num_cpus}", "--disable-usage-stats"]
    log_path = temp_dir / "head.log"
    # Ray's single-machine mode for this head alone: `--node-ip-address=127.0.0.1` is replaced by the routable IP
    # (ray._private.services.resolve_ip_for_localhost), this switch keeps every server of the head on 127.0.0.1.
    head_env = {**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **NO_DRAIN}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=head_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    head = Head(proc, f"http://127.0.0.1:{dash}", f"127.0.0.1:{gcs}", temp_dir)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            http_status(f"{head.dashboard}/api/version", token)
            return head
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(proc)
                raise RuntimeError(f"ray head did not come up: {log_path.read_text()[-2000:]}") from None
            time.sleep(1)


NO_AGENT_YET = "No available agent to submit job"
"""Ray's answer (HTTP 500, "please try again later") to a submission that reaches a head whose dashboard agent has
not registered yet: the dashboard answers before the agent, and on a loaded 2-core machine the agent took longer
than the submission (seen in a full test run beside two training jobs). Nothing is submitted."""


def submit_job(address: str, env: dict[str, str], entrypoint: list[str], *, cwd: Path, timeout_s: float = 600,
               agent_wait_s: float = 120, submission_id: str | None = None) -> subprocess.CompletedProcess:
    """`ray job submit --address ADDRESS --working-dir . -- ENTRYPOINT` from ``cwd``, submitted again while the
    head says its agent is not up yet (``NO_AGENT_YET``), for at most ``agent_wait_s``. ``submission_id`` names the
    job for the head's jobs API (``/api/jobs/<submission_id>``)."""
    named = ["--submission-id", submission_id] if submission_id else []
    cmd = [str(RAY_BIN), "job", "submit", "--address", address, *named, "--working-dir", ".", "--", *entrypoint]
    deadline = time.monotonic() + agent_wait_s
    while True:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode == 0 or NO_AGENT_YET not in proc.stderr or time.monotonic() > deadline:
            return proc
        time.sleep(2)


def kill_node(proc: subprocess.Popen, timeout_s: float = 30) -> list[str]:
    """SIGKILL every process of a node started with ``start_new_session=True`` (its `ray start`, raylet, agents and
    workers), each by its PID, as when the machine dies: nothing drains, nothing is told. Returns what was killed
    (``name:pid``)."""
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    killed = []
    for process in family:
        try:
            killed.append(f"{process.name()}:{process.pid}")
            process.kill()
        except psutil.NoSuchProcess:  # a worker may exit between the listing and its kill
            pass
    psutil.wait_procs(family, timeout=timeout_s)
    proc.wait(timeout=timeout_s)
    return killed


def stop(proc: subprocess.Popen, timeout_s: float = 30) -> None:
    """End a process started with ``start_new_session=True`` and everything it started: SIGKILL to each of its
    processes by PID (``kill_node``), then to its process group (anything of it that left the tree). A test's node
    has nothing to hand over; SIGTERM had `ray start --block` end its processes one by one, which took an idle head
    3.7 s and once 30 s (this function's old timeout) on the loaded 2-core machine, against 1.3 and 1.8 s killed."""
    kill_node(proc, timeout_s)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # the whole group is gone
        pass


# `ray start` for a node that joins a head on 127.0.0.1: it swaps 127.0.0.1 (for --address and --node-ip-address)
# for the machine's routable IP (ray._private.services.resolve_ip_for_localhost), where the head does not listen, and
# refuses to join a cluster under the head's single-machine switch (scripts.py: "Multi-node Ray clusters are not
# supported"). Answering 127.0.0.1 for this process's own IP keeps the node, and every server it starts, on loopback.
_JOIN_ON_LOOPBACK = ("import ray._private.services as s; s.get_node_ip_address = lambda address=None: '127.0.0.1'; "
                     "from ray.scripts.scripts import main; main()")


def hiding_script(hide: list[Path], *, keep: list[Path], keep_writable: list[Path], scratch: Path) -> str:
    """Shell commands, for a fresh mount namespace, that cover each folder of ``hide`` with an empty tmpfs, except
    ``keep`` (bound back read-only) and ``keep_writable`` (bound back as they are) inside them.

    Each tmpfs is built at ``scratch`` first, with its kept folders bound into it while they are still in sight, then
    moved over the folder it hides: once a tmpfs covers a folder, nothing under it can be reached by path to be bound
    back. ``scratch`` (an empty folder) must stay in sight throughout: inside a kept folder or outside every hidden
    one. A folder of ``hide`` inside another is covered with it."""
    tops = sorted({p for p in hide if not any(q != p and q in p.parents for q in hide)})
    q = shlex.quote
    commands = []
    for top in tops:
        commands.append(f"mount -t tmpfs tmpfs {q(str(scratch))}")
        for path, writable in [(p, False) for p in keep] + [(p, True) for p in keep_writable]:
            if top not in path.parents:
                continue
            spot = scratch / path.relative_to(top)
            commands += [f"mkdir -p {q(str(spot))}", f"mount --bind {q(str(path))} {q(str(spot))}"]
            if not writable:
                commands.append(f"mount -o remount,bind,ro {q(str(spot))}")
        commands.append(f"mount --move {q(str(scratch))} {q(str(top))}")
    return " && ".join(commands)


def start_hidden_node(head: Head, temp_dir: Path, env: dict[str, str], *, hide: list[Path], keep: list[Path] = (),
                      num_cpus: int) -> subprocess.Popen:
    """A second node that cannot see ``hide`` (each covered by an empty tmpfs in its own mount namespace), as a node
    of a real cluster cannot see the driver's disk, except ``keep`` inside them (read-only: the installed
    interpreter and packages a node image has) and its own ``temp_dir``. Needs root (or CAP_SYS_ADMIN). The caller
    ends it with ``stop``."""
    scratch = temp_dir / "scratch"
    scratch.mkdir(exist_ok=True)
    mounts = hiding_script(hide, keep=keep, keep_writable=[temp_dir], scratch=scratch)
    ray = [sys.executable, "-c", _JOIN_ON_LOOPBACK, "start", f"--address={head.gcs}", "--node-ip-address=127.0.0.1",
           f"--temp-dir={temp_dir}", *node_ports(worker_ports(300)), f"--num-cpus={num_cpus}",
           "--block", "--disable-usage-stats"]
    # `cd /`: a process keeps its working folder through a mount over it, and the node's processes inherit it (run
    # from the checkout, `ls pyproject.toml` still lists it after a tmpfs covers /work/main)
    script = " && ".join(c for c in (mounts, "cd /", f"exec {shlex.join(ray)}") if c)
    with open(temp_dir / "node.log", "w") as log:
        return subprocess.Popen(["unshare", "-m", "sh", "-c", script], env={**env, **NO_DRAIN}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def can_hide_folders() -> str | None:
    """Why a node with hidden folders cannot be started here (None when it can)."""
    import shutil
    import tempfile

    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs tmpfs {d}"], capture_output=True,
                              text=True)
    if proc.returncode:
        return f"`unshare -m` + `mount -t tmpfs` is not permitted here (needs root): {proc.stderr.strip()}"
    return None
