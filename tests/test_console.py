"""What a user sees: progress lines (counts, rates, ETA), the filter that drops only Ray's and W&B's known-benign
lines (at the file-descriptor level, where Ray's C++ lines arrive), and the demo job and a tiny training run as a user
runs them: live progress, the next commands, and no line at ERROR or WARNING level."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import simulator_missing

from pipelines.console import duration, eta_s, is_benign, metrics_line, progress_line

REPO_ROOT = Path(__file__).resolve().parents[1]

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


@pytest.mark.parametrize("line", [
    "[2026-11-25 22:24:35,630 E 31267 31267] core_worker.cc:2465: Actor with class name: 'MapWorker(MapBatches("
    "ParseInputs))' and ID: 'fc87d052' has constructor arguments in the object store and max_restarts > 0. If the "
    "arguments in the object store go out of scope or are lost, the actor restart will fail.",
    "2026-11-25 22:24:35,636\tWARNING __init__.py:28 -- Progress bars disabled. To enable, set `ray.data.DataContext"
    ".get_current().enable_progress_bars = True`.",
    "(DatasetManager pid=3268)   self.exclude_resources = exclude_resources",
])
def test_known_benign_lines_are_recognised(line):
    assert is_benign(line)


@pytest.mark.parametrize("line", [
    "[parse] 120/200 inputs (60%) · 3,400 rows · 272 rows/s · 0 quarantined · ETA 0:12",
    "[2026-11-25 22:24:35,630 E 31267 31267] core_worker.cc:900: Unexpected worker failure",
    "2026-11-25 22:24:35,636\tWARNING worker.py:1 -- The node has run out of memory",
    "ValueError: token id 9000 is outside the vocabulary",
])
def test_everything_else_passes(line):
    assert not is_benign(line)


def test_the_filter_drops_benign_lines_written_below_python_and_keeps_the_rest():
    """Lines written straight to the file descriptors, as Ray's C++ core worker writes them, in one process."""
    code = ("import os, sys; sys.path.insert(0, sys.argv[1])\n"
            "from pipelines.console import filter_known_noise\n"
            "filter_known_noise()\n"
            "os.write(2, b\"[2026-11-25 22:24:35,630 E 1 1] core_worker.cc:2465: Actor with class name: 'A' and ID: "
            "'b' has constructor arguments in the object store and max_restarts > 0. ...\\n\")\n"
            "os.write(2, b'kept on stderr\\n')\n"
            "print('kept on stdout')\n"
            "os.write(1, b'a partial line')\n")
    out = subprocess.run([sys.executable, "-c", code, str(REPO_ROOT)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "kept on stderr\n"
    assert out.stdout == "kept on stdout\na partial line"


def _run(args: list[str], timeout_s: int) -> tuple[list[str], list[str]]:
    """(stdout's lines, stderr's lines) of a command line run as a user runs it."""
    proc = subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return proc.stdout.splitlines(), proc.stderr.splitlines()


@pytest.mark.timeout(600)
def test_the_demo_job_and_a_tiny_training_run_print_progress_next_steps_and_no_alarm(tmp_path):
    if reason := simulator_missing():
        pytest.skip(reason)
    parse, parse_err = _run(["pipelines/parse_replays.py", "--tiny", "--source", "generated", "--out",
                             str(tmp_path / "out"), "--progress-every-s", "1"], 300)
    train, train_err = _run(["training/offline_rl.py", "--tiny", "--shards", parse[-1], "--out", str(tmp_path / "run"),
                             "--wandb-mode", "offline", "--steps", "8"], 300)
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
