"""What a user sees: progress lines (counts, rates, ETA), the filter that drops only Ray's and W&B's known-benign
lines (at the file-descriptor level, where Ray's C++ lines arrive) and never a dying process's last lines, and the demo
job and a tiny training run as a user runs them: live progress, the next commands, and no line at ERROR or WARNING
level."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import simulator_missing

from pipelines.console import BENIGN, LineFilter, copy_filtered, duration, eta_s, is_benign, metrics_line, progress_line

REPO_ROOT = Path(__file__).resolve().parents[2]

# Lines Ray, W&B and Python print at ERROR or WARNING level: glog (``[... E 123 456] file.cc``), Python logging
# (``2026-... ERROR file.py:12 --``), warnings (``UserWarning:``), W&B's ``wandb: WARNING``, tracebacks.
ALARMING = re.compile(r"\[[\d\- :,.]+ [EWF] \d+ \d+\]|\b(ERROR|WARNING|CRITICAL)\b|\w+Warning:|^Traceback|wandb: ")


def test_durations_and_etas():
    assert duration(65) == "1:05" and duration(3725) == "1:02:05" and duration(float("nan")) == "?"
    assert eta_s(25, 100, 10.0) == pytest.approx(30.0) and eta_s(0, 100, 10.0) != eta_s(0, 100, 10.0)


def test_progress_lines_say_done_of_total_rates_and_eta():
    assert progress_line("parse", 120, 200, "inputs", {"rows": "3,400", "rows/s": "272"}, 12.0) == \
        "[parse] 120/200 inputs (60%) · 3,400 rows · 272 rows/s · ETA 0:12"
    assert progress_line("parse", 5, None, "inputs", {"": "37% of the input bytes"}, float("nan")) == \
        "[parse] 5 inputs · 37% of the input bytes · ETA ?"
    row = {"step": 20, "loss": 1.23456, "accuracy": 0.5, "turns_per_s": 410.2, "elapsed_s": 3.0, "eta_s": 65.0}
    assert metrics_line("train", row, 40) == "[train] step 20/40 · loss 1.235 · accuracy 0.5 · 410 turns/s · ETA 1:05"
    assert metrics_line("train", row, 40, done=True).startswith("[train] done at step 20/40 · loss 1.235")


# Ray's forwarded-line prefix as Ray prints it when the driver's stdout is not a terminal (cyan, then reset).
CYAN, RESET = "\x1b[36m", "\x1b[0m"
ACTOR_ARGS = ("[2026-11-26 13:30:56,428 E 5429 5429] core_worker.cc:2465: Actor with class name: '{}' and ID: "
              "'0777ab9b4d69f37849f5ee0101000000' has constructor arguments in the object store and max_restarts > 0. "
              "If the arguments in the object store go out of scope or are lost, the actor restart will fail. See "
              "https://github.com/ray-project/ray/issues/53727 for more details.")
CLEANER = ("Failed to query Ray Train Controller actor state. State API may be temporarily unavailable. Continuing to "
           "monitor.")
EXCLUDE_RESOURCES = ("/work/main/.venv/lib/python3.11/site-packages/ray/data/_internal/execution/interfaces/"
                     "execution_options.py:436: RayDeprecationWarning: `ExecutionOptions.exclude_resources` is "
                     "deprecated and will be removed after January 2027. Use `ExecutionOptions.label_selector` to "
                     "constrain Ray Data work to labeled nodes.")
PROGRESS_OFF = ("Progress bars disabled. To enable, set "
                "`ray.data.DataContext.get_current().enable_progress_bars = True`.")
CONCURRENCY = ("The argument ``concurrency`` is deprecated in Ray 2.51. Please specify argument ``compute`` instead. "
               "For more information, see https://docs.ray.io/en/master/data/transforming-data.html#"
               "stateful-transforms.")
REPORT = ("Reporting training result 1: TrainingReport(checkpoint=Checkpoint(filesystem=local, path=/tmp/run/"
          "checkpoint_2026-11-26_13-31-45.866014), metrics={'step': 4, 'loss': 1.908}, validation_spec=None) "
          "from rank 0")
CHECKPOINT = "Checkpoint successfully created at: Checkpoint(filesystem=local, path=/tmp/run/checkpoint_2026-11-26)"

# (a line Ray 2.60 prints, as a Ray 2.60 run printed it; a line with the same words from elsewhere, which must pass)
BENIGN_AND_LOOKALIKE = {
    "actor arguments, Ray Data's actor pool, from the driver": (
        ACTOR_ARGS.format("MapWorker(MapBatches(ParseInputs))"), ACTOR_ARGS.format("MyActor")),
    "actor arguments, Ray Train's watcher, forwarded from its controller": (
        f"{CYAN}(TrainController pid=7641){RESET} " + ACTOR_ARGS.format("PreemptionWatcher").replace("5429 5429",
                                                                                                   "7641 7673"),
        f"{CYAN}(TrainController pid=7641){RESET} " + ACTOR_ARGS.format("ParseActor")),
    "actor arguments, Ray Data's actor class; the same words without Ray's C++ log prefix": (
        ACTOR_ARGS.format("_MapWorker"), ACTOR_ARGS.format("_MapWorker").split("core_worker.cc:2465: ")[1]),
    "actor arguments, Ray Data's actor class; the same line at FATAL level": (
        ACTOR_ARGS.format("_MapWorker"), ACTOR_ARGS.format("_MapWorker").replace(" E ", " F ")),
    "progress bars off, driver": (
        f"2026-11-25 22:24:35,636\tWARNING __init__.py:28 -- {PROGRESS_OFF}",
        f"2026-11-25 22:24:35,636\tWARNING parse_replays.py:28 -- {PROGRESS_OFF}"),
    "progress bars off, a training worker": (
        f"{CYAN}(RayTrainWorker pid=8036){RESET} {PROGRESS_OFF}", f"[train] {PROGRESS_OFF}"),
    "progress UI advert": (
        "2026-11-25 22:24:35,636\tINFO __init__.py:70 -- [dataset]: A new progress UI is available. To enable, set "
        "`ray.data.DataContext.get_current().enable_rich_progress_bars = True`.",
        "2026-11-25 22:24:35,636\tERROR __init__.py:70 -- [dataset]: A new progress UI is available. To enable, set "
        "it."),
    "concurrency deprecation": (
        f"2026-11-25 22:24:35,636\tWARNING util.py:650 -- {CONCURRENCY}", f"ValueError: {CONCURRENCY}"),
    "exclude_resources deprecation, Ray Train's DatasetManager": (
        f"{CYAN}(DatasetManager pid=8191){RESET} {EXCLUDE_RESOURCES}",
        f"{CYAN}(RayTrainWorker pid=8036){RESET} /work/main/training/fit.py:88: RayDeprecationWarning: "
        "`ExecutionOptions.exclude_resources` is deprecated and will be removed after January 2027."),
    "exclude_resources deprecation, its source line": (
        "(DatasetManager pid=3268)   self.exclude_resources = exclude_resources",
        "(RayTrainWorker pid=3268)   self.exclude_resources = exclude_resources"),
    "exclude_resources deprecation, its source line uncoloured; a traceback's frame": (
        f"{CYAN}(DatasetManager pid=8191){RESET}   self.exclude_resources = exclude_resources",
        "    self.exclude_resources = exclude_resources"),
    "training result narrated by a training worker": (
        f"{CYAN}(RayTrainWorker pid=8036){RESET} {REPORT}", f"[train] {REPORT}"),
    "checkpoint narrated by a training worker": (
        f"{CYAN}(RayTrainWorker pid=8036){RESET} {CHECKPOINT}", CHECKPOINT),
    "Ray Train's cleaner at exit; an error raised by user code": (
        f"{CYAN}(PlacementGroupCleaner pid=9120){RESET} {CLEANER}",
        "RuntimeError: Failed to query Ray Train Controller actor state: the controller is gone"),
    "Ray Train's cleaner, deduplicated; the same words from a training worker": (
        f"{CYAN}(PlacementGroupCleaner pid=9120, ip=10.0.0.2){RESET} {CLEANER}\x1b[32m [repeated 3x across cluster] "
        "(Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication.)\x1b[0m",
        f"{CYAN}(RayTrainWorker pid=8036){RESET} {CLEANER}"),
}


@pytest.mark.parametrize(("benign", "lookalike"), BENIGN_AND_LOOKALIKE.values(), ids=BENIGN_AND_LOOKALIKE)
def test_ray_benign_lines_are_dropped_and_the_same_words_from_elsewhere_pass(benign, lookalike):
    assert is_benign(benign)
    assert not is_benign(lookalike)


def test_every_benign_pattern_has_its_example():
    """A new pattern comes with a line it drops (above) and a lookalike that passes."""
    examples = [benign for benign, _ in BENIGN_AND_LOOKALIKE.values()]
    assert all(any(pattern.fullmatch(line) for line in examples) for pattern, _ in BENIGN)


@pytest.mark.parametrize("line", [
    "[parse] 120/200 inputs (60%) · 3,400 rows · 272 rows/s · 0 quarantined · ETA 0:12",
    "[2026-11-25 22:24:35,630 E 31267 31267] core_worker.cc:900: Unexpected worker failure",
    "2026-11-25 22:24:35,636\tWARNING worker.py:1 -- The node has run out of memory",
    "ValueError: token id 9000 is outside the vocabulary",
    "[2026-11-26 10:00:00,123 F 123 456] raylet.cc:10: Check failed: x",
    "Fatal Python error: Segmentation fault",
    "*** SIGABRT received at time=1764151200 on cpu 1 ***",
    "(MapWorker(MapBatches(ParseInputs)) pid=3268) ray.exceptions.OutOfMemoryError: Task was killed due to the node "
    "running low on memory.",
    "Traceback (most recent call last):",
])
def test_everything_else_passes(line):
    assert not is_benign(line)


def test_line_filter_keeps_partial_lines_and_whole_tracebacks():
    keep = LineFilter()
    benign = f"{CYAN}(PlacementGroupCleaner pid=9120){RESET} {CLEANER}".encode()
    assert keep.feed(b"first\n" + benign[:20]) == b"first\n"  # a line may come in pieces
    assert keep.feed(benign[20:] + b"\n[parse] 1/2") == b""
    assert keep.idle() == b"[parse] 1/2"  # an unfinished line shown as it is (a progress line, a prompt) ...
    assert keep.feed(b" done\n" + benign + b"\n") == b" done\n"  # ... and its rest, whatever it says
    frames = (b"(DatasetManager pid=3268) Traceback (most recent call last):\n"
              b"(DatasetManager pid=3268)   self.exclude_resources = exclude_resources\n"
              b"(DatasetManager pid=3268) ValueError: bad resources\n")
    source_line = b"(DatasetManager pid=3268)   self.exclude_resources = exclude_resources\n"
    assert keep.feed(frames + source_line) == frames  # in a traceback even a benign-looking line is shown
    assert keep.feed(b"no newline") == b"" and keep.end() == b"no newline"


def _pipe_with(data: bytes) -> tuple[int, int]:
    read, write = os.pipe()
    os.write(write, data)
    return read, write


def test_copy_filtered_copies_until_the_writer_is_done_even_when_another_process_holds_the_pipe():
    """A process the writer started (a local Ray's raylet) may hold the pipe's write end for ever: the filter ends
    when the writer says it is done (its end of ``done`` closes, also when it dies), after copying what it wrote."""
    benign = f"{CYAN}(PlacementGroupCleaner pid=9120){RESET} {CLEANER}\n".encode()
    src, src_write = _pipe_with(b"line one\n" + benign + b"[2026-11-26 10:00:00,123 F 1 2] raylet.cc:10: Check "
                                b"failed: x\nlast words")
    out, out_write = os.pipe()
    done, done_write = os.pipe()
    os.close(done_write)  # the writer is done, while src_write stays open
    try:
        copy_filtered({src: out_write}, done)
        os.close(out_write)
        with os.fdopen(out, "rb") as shown:
            assert shown.read() == b"line one\n[2026-11-26 10:00:00,123 F 1 2] raylet.cc:10: Check failed: x\n" \
                                   b"last words"
    finally:
        for fd in (src, src_write, done):
            os.close(fd)


def _python(code: str, **kwargs) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python that imports this checkout, its stdout and stderr captured (bytes)."""
    prologue = f"import os, subprocess, sys; sys.path.insert(0, {str(REPO_ROOT)!r})\n"
    return subprocess.run([sys.executable, "-c", prologue + code], capture_output=True, timeout=120, **kwargs)


def test_the_filter_drops_benign_lines_written_below_python_and_keeps_the_rest():
    """Lines written straight to the file descriptors, as Ray's C++ core worker writes them, then a normal exit."""
    code = ("from pipelines.console import filter_known_noise\n"
            "filter_known_noise()\n"
            f"os.write(2, {(ACTOR_ARGS.format('MapWorker(MapBatches(ParseInputs))') + chr(10)).encode()!r})\n"
            f"os.write(2, {(ACTOR_ARGS.format('MyActor') + chr(10)).encode()!r})\n"
            "os.write(2, b'kept on stderr\\n')\n"
            "print('kept on stdout')\n"
            "os.write(1, b'a partial line')\n")
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert out.stderr.decode() == ACTOR_ARGS.format("MyActor") + "\nkept on stderr\n"
    assert out.stdout == b"kept on stdout\na partial line"


def test_what_a_process_writes_before_it_aborts_reaches_the_console():
    """A failed ``RAY_CHECK`` logs at FATAL level and calls ``abort()``: the process dies at once, and its last lines
    are in the filter's pipe; the filter, another process, still shows them. Python's own fatal-error report
    (faulthandler) goes to the original stderr."""
    code = ("from pipelines.console import filter_known_noise\n"
            "filter_known_noise()\n"
            f"os.write(2, {(ACTOR_ARGS.format('_MapWorker') + chr(10)).encode()!r})\n"
            "os.write(2, b'[2026-11-26 10:00:00,123 F 123 456] raylet.cc:10: Check failed: x\\n')\n"
            "os.write(2, b'Fatal Python error: Segmentation fault\\n')\n"
            "os.write(1, b'[parse] 3/12 inputs read')\n"
            "os.abort()\n")
    out = _python(code)
    assert out.returncode == -signal.SIGABRT
    stderr = out.stderr.decode()
    assert "[2026-11-26 10:00:00,123 F 123 456] raylet.cc:10: Check failed: x\nFatal Python error: Segmentation " \
           "fault\n" in stderr
    assert "Fatal Python error: Aborted" in stderr  # faulthandler's report, with the stack
    assert "core_worker.cc" not in stderr  # the benign line before it is still left out
    assert out.stdout == b"[parse] 3/12 inputs read"


def test_a_process_that_outlives_the_writer_does_not_hold_its_exit():
    """A child that inherited stdout and stderr (here: sleeping until the test closes its stdin) keeps the filter's
    pipes open; the writer still exits, with its output shown."""
    hold_read, hold_write = os.pipe()
    code = ("from pipelines.console import filter_known_noise\n"
            "filter_known_noise()\n"
            f"subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], stdin={hold_read})\n"
            "print('bye')\n")
    try:
        out = _python(code, pass_fds=(hold_read,))
    finally:
        os.close(hold_read)
        os.close(hold_write)  # the child reads its stdin's end and exits
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"bye\n"


def _read_until(stream, marker: bytes, timeout_s: float = 60) -> bytes:
    """What ``stream`` shows up to and including ``marker`` (fails after ``timeout_s`` without it)."""
    shown = b""
    while marker not in shown:
        ready, _, _ = select.select([stream], [], [], timeout_s)
        assert ready, f"nothing shown in {timeout_s} s, so far {shown!r}"
        chunk = os.read(stream.fileno(), 1024)
        assert chunk, f"closed with {shown!r}"
        shown += chunk
    return shown


def test_ctrl_c_reaches_the_command_and_its_traceback_is_shown():
    """Ctrl-C signals the terminal's whole process group: the filter runs in a session of its own, so it is still
    there to show the command's KeyboardInterrupt."""
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "from pipelines.console import filter_known_noise\n"
            "filter_known_noise()\n"
            "print('ready', flush=True)\n"
            "try:\n"
            "    sys.stdin.read()\n"
            "except KeyboardInterrupt:\n"
            "    print('[parse] interrupted: 3/12 inputs read', file=sys.stderr)\n"
            "    raise\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(REPO_ROOT)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert _read_until(proc.stdout, b"ready\n") == b"ready\n"
        os.killpg(proc.pid, signal.SIGINT)  # as the terminal does
        stderr = proc.stderr.read().decode()  # to its end: the command's and the filter's exit
        assert proc.wait(timeout=60) != 0
        assert stderr.startswith("[parse] interrupted: 3/12 inputs read\nTraceback (most recent call last):\n")
        assert stderr.endswith("KeyboardInterrupt\n") and "console.py" not in stderr  # the command's, not the filter's
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()


def test_an_unfinished_line_is_shown_while_the_process_waits():
    """A progress line rewritten in place has no newline: it is shown after a moment without one, while the writer
    is still running (it waits for the test to close its stdin)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "from pipelines.console import filter_known_noise\n"
            "filter_known_noise()\n"
            "sys.stdout.write('\\r[parse] 3/12 inputs read'); sys.stdout.flush()\n"
            "sys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(REPO_ROOT)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        shown = _read_until(proc.stdout, b"inputs read")
        assert proc.poll() is None  # shown while the writer runs, not at its exit
        assert shown == b"\r[parse] 3/12 inputs read"
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        proc.stdout.close()


def _run(args: list[str], timeout_s: int) -> tuple[list[str], list[str]]:
    """(stdout's lines, stderr's lines) of a command line run as a user runs it."""
    proc = subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return proc.stdout.splitlines(), proc.stderr.splitlines()


@pytest.mark.ray  # each command starts a local Ray of its own, as a user's does
@pytest.mark.simulator
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_demo_job_and_a_tiny_training_run_print_progress_next_steps_and_no_alarm(tiny_generated, tmp_path):
    if reason := simulator_missing():
        pytest.skip(reason)
    # the two commands side by side, each with its own Ray (most of each is Ray's start-up): the training run takes
    # the version the demo job publishes, made once per session by the same tiny config (conftest's
    # tiny_generated), and the demo job must publish a version of the same name, the one its next steps print
    _, published, _ = tiny_generated
    with ThreadPoolExecutor(1) as pool:
        training = pool.submit(_run, ["training/pokemon/offline_rl.py", "--tiny", "--shards", str(published.path),
                                      "--out", str(tmp_path / "run"), "--wandb-mode", "offline", "--steps", "8"], 300)
        parse, parse_err = _run(["pipelines/parse_replays.py", "--tiny", "--source", "generated", "--out",
                                 str(tmp_path / "out"), "--progress-every-s", "1"], 300)
        train, train_err = training.result()
    assert Path(parse[-1]).name == published.path.name and Path(parse[-1]).parent.name == published.path.parent.name
    alarms = [line for line in parse + parse_err + train + train_err if ALARMING.search(line)]
    assert not alarms, "\n".join(alarms)
    progress = [line for line in parse if re.search(r"\[parse\] \d+/12 inputs read \(\d+%\) · \d+ parsed · .* rows/s · "
                                                     r"\d+ quarantined · ETA ", line)]
    assert progress and progress[-1].startswith("[parse] 12/12 inputs read (100%) · 12 parsed")
    steps = parse[parse.index(next(line for line in parse if "published:" in line)) + 1:-1]
    assert [s.split(":")[0] for s in steps] == ["[parse] look at it", "[parse] train a policy", "[parse] battle it"]
    assert f"--shards {parse[-1]}" in steps[1] and "make notebook" in steps[0]
    assert any(re.search(r"\[train\] step 8/8 · loss [\d.]+ · .* samples/s · ETA 0:00", line) for line in train)
    assert [line for line in train if "W&B" in line and "wandb sync" in line]  # one line where the run is
    assert len([line for line in train if "[train] PokemonPolicy:" in line]) == 1  # worker lines come once
    assert train[-2].startswith("[train] done at step 8/8 · loss")
