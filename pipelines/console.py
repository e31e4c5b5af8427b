"""What a user sees on the console: progress lines with an ETA, and the filter that keeps the known-benign lines of
Ray and W&B off it.

Progress: jobs call ``Ticker.due()`` and print ``progress_line(...)``; on a terminal ``Ticker.show`` rewrites one
line in place, anywhere else (``ray job submit``, a log file, a test) it prints plain lines.

Noise: ``filter_known_noise()`` (called by the command lines, never by library calls) routes this process's stdout
and stderr through a filter that drops the lines of ``BENIGN`` and passes everything else unchanged. It works on the
file descriptors, since the lines come from three places a Python-level filter cannot all reach: Ray's C++ core
worker writes to the driver's stderr directly, worker processes' lines are forwarded by Ray to the driver's
stdout/stderr, and Python loggers of Ray's own modules.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time

BENIGN: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"core_worker\.cc:\d+: Actor with class name: '.*' and ID: '.*' has constructor arguments in the "
                r"object store and max_restarts > 0"),
     # Ray (since PR 53713, for its issue 53727) says this for every restartable actor created with an argument in
     # the object store. Ray Data's actor pools (the parse actors) and Ray Train's PreemptionWatcher always are:
     # both put their argument in the store themselves and hold it for the actors' life, so a restart finds it.
     "Ray Data / Ray Train actor arguments"),
    (re.compile(r"Progress bars disabled\. To enable, set"),
     # the jobs turn Ray Data's bars off and print their own progress line (plain under ray job submit)
     "Ray Data progress bars off"),
    (re.compile(r"A new progress UI is available\. To enable"), "Ray Data advertising its progress UI"),
    (re.compile(r"The argument ``concurrency`` is deprecated in Ray"),
     # raised inside Ray Data for a map_batches given ``compute=ActorPoolStrategy``: Ray 2.60's own call path
     "Ray Data deprecation in its own call path"),
    (re.compile(r"RayDeprecationWarning: `ExecutionOptions\.exclude_resources` is deprecated|"
                r"\s+self\.exclude_resources = exclude_resources\s*$"),
     # Ray Train's DatasetManager sets the field Ray Data deprecated (Ray 2.60); the second line is the warning's
     # source line
     "Ray Train using a Ray Data field Ray deprecated"),
    (re.compile(r"Reporting training result \d+: TrainingReport\(|Checkpoint successfully created at: Checkpoint\("),
     # Ray Train narrating each checkpoint with the whole metrics dict: the run's progress line has the step and its
     # losses, and the command prints the last checkpoint's folder
     "Ray Train narrating checkpoints"),
    (re.compile(r"Failed to query Ray Train Controller actor state"),
     # Ray Train's placement-group cleaner polls the controller after a run ends; at exit it races the shutdown
     "Ray Train cleaner racing the shutdown"),
)
"""Lines dropped from the console: (pattern, why). Only lines that say nothing about the user's data or set-up."""


def is_benign(line: str) -> bool:
    """Whether a console line is one of ``BENIGN``."""
    return any(pattern.search(line) for pattern, _ in BENIGN)


class _LineFilter:
    """One file descriptor routed through a pipe: a thread copies the pipe to the original descriptor line by line,
    leaving out benign lines. A line without its newline yet (a prompt, a refreshed progress line) is passed on
    after ``flush_after_s`` without one."""

    def __init__(self, fd: int, flush_after_s: float = 0.2):
        self.fd, self.flush_after_s = fd, flush_after_s
        self.original = os.dup(fd)
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)
        self.read_end = read_end
        self.thread = threading.Thread(target=self._copy, daemon=True, name=f"console-filter-{fd}")
        self.thread.start()

    def _copy(self) -> None:
        import select

        pending = b""
        while True:
            ready, _, _ = select.select([self.read_end], [], [], self.flush_after_s)
            if not ready:
                if pending:  # a partial line nobody finishes: show it as it is
                    os.write(self.original, pending)
                    pending = b""
                continue
            chunk = os.read(self.read_end, 65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            kept = [line for line in lines if not is_benign(line.decode("utf-8", "replace"))]
            if kept:
                os.write(self.original, b"\n".join(kept) + b"\n")
        if pending:
            os.write(self.original, pending)

    def close(self) -> None:
        os.dup2(self.original, self.fd)  # the pipe's last writer, unless a child still holds it
        self.thread.join(timeout=1.0)


_filters: list[_LineFilter] = []


def filter_known_noise() -> None:
    """Drop ``BENIGN`` lines from this process's stdout and stderr until it exits (idempotent). For command lines:
    a library call leaves the caller's output alone."""
    if _filters or os.environ.get("REPLAYFORGE_RAW_OUTPUT"):  # REPLAYFORGE_RAW_OUTPUT=1: everything, for debugging
        return
    import atexit

    sys.stdout.flush()
    sys.stderr.flush()
    _filters.extend(_LineFilter(fd) for fd in (1, 2))
    atexit.register(_restore)


def _restore() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    while _filters:
        _filters.pop().close()


def terminal() -> bool:
    """Whether stdout is a terminal (before any filter: the filter's pipe is not one)."""
    fd = _filters[0].original if _filters else sys.stdout.fileno()
    try:
        return os.isatty(fd)
    except OSError:
        return False


def duration(seconds: float) -> str:
    """``1:02:03`` / ``2:03`` (hours only when there are any); ``?`` when unknown."""
    if seconds != seconds or seconds in (float("inf"), float("-inf")) or seconds < 0:
        return "?"
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def eta_s(done: float, total: float, elapsed_s: float) -> float:
    """Seconds left at the rate so far (NaN before anything is done or with no total)."""
    if not total or done <= 0:
        return float("nan")
    return elapsed_s * max(total - done, 0.0) / done


def progress_line(tag: str, done: int, total: int | None, unit: str, fields: dict[str, str], eta: float) -> str:
    """``[tag] 120/200 inputs (60%) · 3,400 rows · 272 rows/s · ETA 0:12``: done of total (total None: unknown),
    then the fields as given, then the ETA."""
    count = f"{done:,}/{total:,} {unit} ({100.0 * done / total:.0f}%)" if total else f"{done:,} {unit}"
    parts = [count, *(f"{v} {k}" if k else v for k, v in fields.items()), f"ETA {duration(eta)}"]
    return f"[{tag}] " + " · ".join(parts)


class Ticker:
    """When a progress line is due: every ``every_s`` seconds, and always at the end. ``show`` prints a line: on a
    terminal in place (one line rewritten), elsewhere as a plain line."""

    def __init__(self, every_s: float = 5.0, log=print, in_place: bool | None = None):
        self.every_s, self.log = every_s, log
        self.in_place = (log is print and terminal()) if in_place is None else in_place
        self.last = time.monotonic()
        self.open = False  # an in-place line is on screen without its newline

    def due(self, final: bool = False) -> bool:
        now = time.monotonic()
        if final or now - self.last >= self.every_s:
            self.last = now
            return True
        return False

    def show(self, line: str, final: bool = False) -> None:
        if not self.in_place:
            self.log(line)
            return
        sys.stdout.write("\r" + line + "\x1b[K" + ("\n" if final else ""))
        sys.stdout.flush()
        self.open = not final

    def end(self) -> None:
        """Finish an in-place line (before other output)."""
        if self.open:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.open = False


def metrics_line(tag: str, metrics: dict, total_steps: int | None, done: bool = False) -> str:
    """A trainer's progress line from its metrics row: ``[train] step 20/40 · loss 1.234 · ... · 410 turns/s · ETA
    0:32``; values to 4 significant digits, throughput and the ETA last. ``done``: the run's closing line
    (``[train] done at step 40/40 · ...``, no ETA)."""
    rest = {k: v for k, v in metrics.items() if k not in ("step", "eta_s", "elapsed_s")}
    rates = {k: v for k, v in rest.items() if k.endswith("_per_s")}
    values = [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rest.items() if k not in rates]
    speeds = [f"{v:,.0f} {k.removesuffix('_per_s')}/s" for k, v in rates.items()]
    count = f"step {int(metrics['step']):,}" + (f"/{total_steps:,}" if total_steps else "")
    count = f"done at {count}" if done else count
    parts = [count, *values, *speeds] + ([] if done else [f"ETA {duration(metrics.get('eta_s', float('nan')))}"])
    return f"[{tag}] " + " · ".join(parts)
