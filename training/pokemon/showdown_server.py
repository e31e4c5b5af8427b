"""A local Pokémon Showdown server from the project's own install, for poke-env battles.

Bound to 127.0.0.1 on the port given, started with ``--skip-build --no-security``, stopped by its PID (its process
group) when the ``with`` block ends. The bind address is set in the package's ``config/config.js`` (git-ignored,
part of the install), written from ``config-example.js`` with only ``bindaddress`` changed.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from pipelines.pokemon.dex import showdown_dir

CLIENT_TIMEOUTS = {"open_timeout": 120.0, "ping_interval": None}
"""poke-env client options for the local server. poke-env's default 10 s websocket handshake times out for one of a
ladder's 12 players on 2 loaded cores: that player never joins and its battles are never played. On loopback a slow
handshake is load, not a dead peer, and there is no peer for keepalive pings to find."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_config(root: Path) -> None:
    example = (root / "config" / "config-example.js").read_text()
    config = re.sub(r"exports\.bindaddress = '[^']*';", "exports.bindaddress = '127.0.0.1';", example)
    target = root / "config" / "config.js"
    if not target.exists() or target.read_text() != config:
        target.write_text(config)


@contextmanager
def showdown_server(port: int, *, timeout_s: float = 180.0, log_path: Path | None = None):
    """Yields the websocket URL of a running local server; stops it by PID afterwards. ``timeout_s``: how long it
    may take to listen; a start on 2 cores took 25 s beside one other job and over 60 s where four servers started
    at once beside a parse job, so a busy machine is waited for rather than failed."""
    root = showdown_dir()
    _write_config(root)
    for sub in ("logs/repl", "logs/chat", "logs/modlog"):  # the server expects its log folders (git-ignored)
        (root / sub).mkdir(parents=True, exist_ok=True)
    log = open(log_path, "w") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(["node", "pokemon-showdown", "start", "--skip-build", "--no-security", str(port)],
                            cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"Showdown server exited with {proc.returncode} (log: {log_path})")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError as err:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Showdown server did not listen on 127.0.0.1:{port} in {timeout_s}s") from err
                time.sleep(0.3)
        yield f"ws://127.0.0.1:{port}/showdown/websocket"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if log_path:
            log.close()
