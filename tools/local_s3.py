"""A local S3-compatible server for tests and benchmarks: moto's server mode on 127.0.0.1 at a free port, started
and stopped by its PID (never left listening, never on another interface)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.fs as pafs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def create_bucket(endpoint: str, bucket: str) -> None:
    """A bucket on the server at ``endpoint``: the project's own S3 filesystem never creates buckets (a typo in a
    user's URI must not make one)."""
    pafs.S3FileSystem(endpoint_override=endpoint.split("://", 1)[1], scheme="http", region="us-east-1",
                      allow_bucket_creation=True).create_dir(bucket)


class LocalS3Server:
    """moto's S3 server; ``endpoint`` is its URL once the constructor returns (it waits for the server to answer)."""

    def __init__(self, log_path: Path, start_timeout_s: float = 60):
        self.endpoint = f"http://127.0.0.1:{free_port()}"
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                          self.endpoint.rsplit(":", 1)[1]], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto server did not start: {log_path.read_text()[-2000:]}") from None
                time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
