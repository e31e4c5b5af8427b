"""What a user sees on the console: progress lines with an ETA, and the filter that keeps the known-benign lines of
Ray and W&B off it.

Progress: jobs call ``Ticker.due()`` and print ``progress_line(...)``; on a terminal ``Ticker.show`` rewrites one
line in place, anywhere else (``ray job submit``, a log file, a test) it prints plain lines.

Noise: ``filter_known_noise()`` (called by the command lines, never by library calls) routes this process's stdout
and stderr through a filter that drops the lines of ``BENIGN`` and passes everything else unchanged. It works on the
file descriptors, since the lines come from three places a Python-level filter cannot all reach: Ray's C++ core
worker writes to the driver's stderr directly, worker processes' lines are forwarded by Ray to the driver's
stdout/stderr, and Python loggers of Ray's own modules.

The filter is a child process (this file run as a script, ``copy_filtered``), not a thread: a process that dies
(a failed ``RAY_CHECK`` calls ``abort()``, a segfault, the OOM killer) takes a thread and whatever it has not yet
copied with it, while the child reads the pipes to their end and shows every line the process wrote before dying.
Each ``BENIGN`` pattern matches a whole line, the prefix of the component that prints it included, and no pattern
drops a line of ``FATAL`` or a traceback.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import re
import select
import subprocess
import sys
import time

# The shapes of the lines Ray prints (Ray 2.60), so that each pattern below names the component that prints its line.
_ANSI = r"(?:\x1b\[[0-9;]*m)*"


def _worker(name: str = r".*?") -> str:
    """The prefix of a line Ray forwards from a worker process to the driver: ``(MapWorker(MapBatches(ParseInputs))
    pid=3268) ``, ``(pid=3268) `` for a worker without a task or actor, ``, ip=...`` from another node, coloured
    unless ``RAY_COLOR_PREFIX=0`` (``ray/_private/worker.py: print_worker_logs``). In a worker, Ray's Python loggers
    print the bare message (``ray/_private/log.py: PlainRayHandler``), so the prefix is all that names the source."""
    return _ANSI + rf"\((?:{name} )?pid=\d+(?:, ip=[\w.:-]+)?\)" + _ANSI + " "


def _driver_log(level: str, file: str) -> str:
    """The prefix of a Ray logger's line in the driver: ``2026-11-25 22:24:35,636\\tWARNING __init__.py:28 -- ``
    (``ray._private.ray_constants.LOGGER_FORMAT``, also Ray Data's ``DEFAULT_TEXT_FORMATTER``)."""
    return rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}}\t{level} {re.escape(file)}:\d+ -- "


def _glog(level: str, file: str) -> str:
    """The prefix of a line of Ray's C++ logger: ``[2026-11-25 22:24:35,630 E 31267 31267] core_worker.cc:2465: ``
    (level, pid, thread id, source file and line)."""
    return rf"\[\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}} {level} \d+ \d+\] {re.escape(file)}:\d+: "


# Ray's log deduplication prints a forwarded line that repeated once more with `` [repeated 3x across cluster]``
# after it (the first time also how to turn deduplication off), in green
# (``ray/_private/ray_logging/__init__.py: DedupState.formatted``).
_REPEATED = rf"(?:{_ANSI} \[repeated \d+x across cluster\].*)?"

# Ray Data's actor pools (``MapWorker(MapBatches(ParseInputs))``, named from ``_MapWorker`` by
# ``ray/data/_internal/execution/operators/actor_pool_map_operator.py``) and Ray Train's PreemptionWatcher
# (``ray/train/v2/_internal/callbacks/preemption_callback.py``, ``max_restarts=-1``).
_RAY_OWN_ACTORS = r"MapWorker\([^']+\)|_MapWorker|PreemptionWatcher"

BENIGN: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(rf"(?:{_worker()})?{_glog('E', 'core_worker.cc')}Actor with class name: '(?:{_RAY_OWN_ACTORS})' "
                r"and ID: '[0-9a-f]+' has constructor arguments in the object store and max_restarts > 0\.(?: .*)?"),
     # Ray (since PR 53713, for its issue 53727) says this for every restartable actor created with an argument in
     # the object store. Ray Data's actor pools (the parse actors) and Ray Train's PreemptionWatcher always are:
     # both put their argument in the store themselves and hold it for the actors' life, so a restart finds it.
     # The driver's core worker prints it for the actor pools; the Train controller's, forwarded, for the watcher.
     "Ray Data / Ray Train actor arguments"),
    (re.compile(rf"(?:{_driver_log('WARNING', '__init__.py')}|{_worker()})Progress bars disabled\. To enable, set "
                r"`ray\.data\.DataContext\.get_current\(\)\.enable_progress_bars = True`\." + _REPEATED),
     # the jobs turn Ray Data's bars off and print their own progress line (plain under ray job submit);
     # ray/data/_internal/progress/__init__.py
     "Ray Data progress bars off"),
    (re.compile(rf"(?:{_driver_log('INFO', '__init__.py')}|{_worker()})\[dataset\]: A new progress UI is "
                r"available\. To enable, set .*"),
     "Ray Data advertising its progress UI"),
    (re.compile(rf"(?:{_driver_log('WARNING', 'util.py')}|{_worker()})The argument ``concurrency`` is deprecated "
                r"in Ray [\d.]+\.(?: .*)?"),
     # raised inside Ray Data for a map_batches given ``compute=ActorPoolStrategy``: Ray 2.60's own call path
     # (ray/data/_internal/util.py)
     "Ray Data deprecation in its own call path"),
    (re.compile(rf"{_worker('DatasetManager')}\S*/ray/data/_internal/execution/interfaces/execution_options\.py:\d+: "
                r"RayDeprecationWarning: `ExecutionOptions\.exclude_resources` is deprecated(?: .*)?"),
     # Ray Train's DatasetManager actor builds ExecutionOptions with the field Ray Data deprecated (Ray 2.60);
     # Python's warnings name the line of Ray Data that sets it and print that line below it (the next pattern)
     "Ray Train using a Ray Data field Ray deprecated"),
    (re.compile(rf"{_worker('DatasetManager')}  self\.exclude_resources = exclude_resources"),
     "Ray Train using a Ray Data field Ray deprecated (the warning's source line)"),
    (re.compile(rf"{_worker('RayTrainWorker')}(?:Reporting training result \d+: TrainingReport\(.*\) from rank \d+|"
                r"Checkpoint successfully created at: Checkpoint\(.*\))" + _REPEATED),
     # Ray Train narrating each checkpoint with the whole metrics dict: the run's progress line has the step and its
     # losses, and the command prints the last checkpoint's folder (ray/train/v2/_internal/execution/context.py and
     # storage.py, logged in the training workers)
     "Ray Train narrating checkpoints"),
    (re.compile(rf"{_worker('PlacementGroupCleaner')}Failed to query Ray Train Controller actor state\. State API "
                r"may be temporarily unavailable\. Continuing to monitor\." + _REPEATED),
     # Ray Train's placement-group cleaner (a detached actor, ray/train/v2/_internal/execution/controller/
     # placement_group_cleaner.py) polls the controller after a run ends; at exit it races the shutdown
     "Ray Train cleaner racing the shutdown"),
)
"""Lines dropped from the console: (pattern, why). Only lines that say nothing about the user's data or set-up. A
pattern matches a whole line (``fullmatch``), prefix included: the same words from another component pass."""

FATAL = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} F \d+ \d+\]|Check failed|Fatal Python error|Segmentation fault|SIGSEGV|"
    r"\*\*\* SIGABRT received|\*\*\* Aborted at|(?i:out of memory)|OutOfMemoryError|\bKilled\b|"
    r"Traceback \(most recent call last\)")
"""What a dying process says last (Ray's C++ logger at FATAL level before its ``abort()``, a failed check, a crash,
the OOM killer, a traceback): never dropped, whatever else the line says."""

_WORKER_PREFIX = re.compile(_worker())


def is_benign(line: str) -> bool:
    """Whether a console line (without its newline) is one of ``BENIGN``."""
    line = line.rstrip("\r\n")
    return not FATAL.search(line) and any(pattern.fullmatch(line) for pattern, _ in BENIGN)


class LineFilter:
    """The filter of one stream, without I/O: ``feed`` takes bytes as they come and returns those to show (whole
    lines, less the benign ones), ``idle`` the line begun but not finished (shown as it is when nothing follows for a
    while: a prompt, a progress line rewritten in place), ``end`` what is left at the end."""

    def __init__(self):
        self.pending = b""
        self.continued = False  # the pending line was partly shown: the rest is shown whatever it says
        self.in_traceback = False  # a traceback's lines are all shown, up to its exception's line

    def feed(self, chunk: bytes) -> bytes:
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        return b"".join(line + b"\n" for line in lines if self._keep(line))

    def idle(self) -> bytes:
        shown, self.pending = self.pending, b""
        self.continued = self.continued or bool(shown)
        return shown

    def end(self) -> bytes:
        return self.idle()

    def _keep(self, raw: bytes) -> bool:
        if self.continued:
            self.continued = False
            return True
        line = raw.decode("utf-8", "replace")
        prefix = _WORKER_PREFIX.match(line)
        body = line[prefix.end():] if prefix else line
        if self.in_traceback:  # its frames are indented; the first line that is not is the exception's
            self.in_traceback = body[:1].isspace()
            return True
        if body.startswith("Traceback (most recent call last):"):
            self.in_traceback = True
            return True
        return not is_benign(line)


def copy_filtered(streams: dict[int, int], done_fd: int, parent_pid: int | None = None,
                  flush_after_s: float = 0.2, drain_s: float = 2.0) -> None:
    """Copy each pipe of ``streams`` (its read end → the descriptor to write to) through a ``LineFilter`` until
    every pipe ends, or until ``done_fd`` ends or ``parent_pid`` is no longer this process's parent (the writer
    finished or died): then what the pipes hold is copied, for at most ``drain_s``, and the loop returns.

    Why not wait for the pipes' end alone: processes the writer started (a local Ray's raylet, a forked worker) may
    hold the write ends long after the writer is gone, and the writer's exit must not wait for them."""
    filters = {src: LineFilter() for src in streams}
    last_read_s = {src: time.monotonic() for src in streams}
    open_srcs, broken = set(streams), set()
    drain_until_s = None  # set once the writer is gone

    def show(src: int, data: bytes) -> None:
        dst = streams[src]
        while data and dst not in broken:
            try:
                data = data[os.write(dst, data):]
            except BlockingIOError:  # a descriptor another process made non-blocking (a shared terminal)
                select.select([], [dst], [], 1.0)
            except OSError:  # the reader is gone (a closed pipe): keep reading, so the writer never blocks
                broken.add(dst)

    while open_srcs:
        now = time.monotonic()
        if drain_until_s is None and parent_pid is not None and os.getppid() != parent_pid:
            drain_until_s = now + drain_s
        if drain_until_s is not None:
            timeout_s = 0.05  # what the pipes hold comes at once; a quiet pipe is done
        else:
            partial = [last_read_s[src] + flush_after_s - now for src in open_srcs if filters[src].pending]
            timeout_s = max(0.0, min(partial, default=1.0))  # wake at least every second to look at parent_pid
        watched = [*open_srcs] + ([done_fd] if drain_until_s is None else [])
        ready, _, _ = select.select(watched, [], [], timeout_s)
        now = time.monotonic()
        if done_fd in ready and not os.read(done_fd, 1):
            drain_until_s = now + drain_s
        elif drain_until_s is not None and (not ready or now >= drain_until_s):
            break
        for src in ready:
            if src == done_fd:
                continue
            chunk = os.read(src, 65536)
            if not chunk:
                open_srcs.discard(src)
                continue
            last_read_s[src] = now
            show(src, filters[src].feed(chunk))
        for src in open_srcs:
            if filters[src].pending and now - last_read_s[src] >= flush_after_s:
                show(src, filters[src].idle())
    for src, line_filter in filters.items():
        show(src, line_filter.end())


class _FilterProcess:
    """Descriptors 1 and 2 of this process routed through pipes to a child process running ``copy_filtered``, which
    writes to duplicates of the original descriptors."""

    def __init__(self):
        self.originals = {fd: os.dup(fd) for fd in (1, 2)}
        pipes = {fd: os.pipe() for fd in (1, 2)}
        done_read, self.done_write = os.pipe()  # never written: its end says this process finished or died
        args = [str(os.getpid()), str(done_read), *(f"{read}:{fd}" for fd, (read, _) in pipes.items())]
        try:
            # start_new_session: a Ctrl-C or a kill of the process group reaches the writer, not the filter, which
            # ends by itself once the writer is gone and so shows the writer's last words (a KeyboardInterrupt's
            # traceback). -I: the standard library only, whatever the writer's sys.path or environment.
            self.process = subprocess.Popen(
                [sys.executable, "-I", __file__, *args], stdin=subprocess.DEVNULL, stdout=self.originals[1],
                stderr=self.originals[2], pass_fds=(done_read, *(read for read, _ in pipes.values())),
                start_new_session=True)
        except BaseException:
            for fd in (*self.originals.values(), done_read, self.done_write, *(e for p in pipes.values() for e in p)):
                os.close(fd)
            raise
        os.close(done_read)
        for fd, (read, write) in pipes.items():
            os.close(read)
            os.dup2(write, fd)
            os.close(write)
        # A fatal error's stack (segfault, abort) straight to the original stderr, whatever becomes of the pipes.
        self.faulthandler_was_enabled = faulthandler.is_enabled()
        faulthandler.enable(file=self.originals[2], all_threads=True)

    def close(self, wait_s: float = 5.0) -> None:
        """Put descriptors 1 and 2 back and wait (at most ``wait_s``) for the child to show what the pipes hold."""
        for fd, original in self.originals.items():
            os.dup2(original, fd)
        if self.faulthandler_was_enabled:
            faulthandler.enable(file=sys.stderr, all_threads=True)
        else:
            faulthandler.disable()
        os.close(self.done_write)
        try:
            self.process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass  # a terminal that does not read (paused output): the child ends once it can write or is killed
        for original in self.originals.values():
            os.close(original)

    def forget_in_fork(self) -> None:
        """In a forked child: close its copy of ``done_write``, which would otherwise keep the filter waiting."""
        os.close(self.done_write)


_filter: _FilterProcess | None = None


def filter_known_noise() -> None:
    """Drop ``BENIGN`` lines from this process's stdout and stderr until it exits (idempotent). For command lines:
    a library call leaves the caller's output alone. ``REPLAYFORGE_RAW_OUTPUT=1``: everything, for debugging."""
    global _filter
    if _filter or os.environ.get("REPLAYFORGE_RAW_OUTPUT"):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    _filter = _FilterProcess()
    atexit.register(_restore)
    os.register_at_fork(after_in_child=_forget_in_fork)


def _forget_in_fork() -> None:
    global _filter
    if _filter:
        _filter.forget_in_fork()
        _filter = None


def _restore() -> None:
    global _filter
    if not _filter:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream has nothing left to show
            pass
    _filter.close()
    _filter = None


def terminal() -> bool:
    """Whether stdout is a terminal (before any filter: the filter's pipe is not one)."""
    fd = _filter.originals[1] if _filter else sys.stdout.fileno()
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


def _main(argv: list[str]) -> None:
    """The filter process: ``PARENT_PID DONE_FD READ_FD:OUT_FD ...`` (``_FilterProcess`` starts it)."""
    parent_pid, done_fd, *pairs = argv
    streams = {int(read): int(out) for read, out in (pair.split(":") for pair in pairs)}
    copy_filtered(streams, int(done_fd), parent_pid=int(parent_pid))


if __name__ == "__main__":
    _main(sys.argv[1:])
