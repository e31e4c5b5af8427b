"""A Showdown server log's ``inputLog`` replayed on the pinned simulator, and the check that the replay is the battle
the log records.

``pipelines/showdown/replay_input_log.js`` plays an input log again on pokemon-showdown 0.11.11 and answers with
each player's own stream (the events ``pov_trajectory`` reads, as the generator writes them), the log as a server
keeps it, and the simulator's end-of-battle data. One Node process per Python process serves every replay it asks
for, one JSON line in and one out (``replay``), so a job pays Node's start once per worker, not once per battle.

Two kinds of failure, kept apart: a replay that cannot be made of this input (a line that is no battle input, a
choice the simulator rejects, a simulator crash on it: the answer's ``error``) is a fact about the input, handed
to the parser; Node that will not start, or dies again on the next input, is the machine's: it raises
``RuntimeError`` and the job stops. An input the process dies on (or takes ``timeout_s`` over) twice running
gets an ``error`` of its own, so one input cannot stop a job.
"""

from __future__ import annotations

import atexit
import json
import selectors
import subprocess
import tempfile
import threading

from pipelines.pokemon.dex import REPO_ROOT, node_env

REPLAYER = REPO_ROOT / "pipelines" / "showdown" / "replay_input_log.js"
REPLAY_TIMEOUT_S = 300.0
"""The longest one replay may take: a battle of 1,000 turns (the simulator's limit) replays in a few seconds."""

ROOM_KINDS = frozenset(
    ": j J join l L leave n N name c c: chat raw html uhtml uhtmlchange inactive inactiveoff title init deinit noinit "
    "expire notify tempnotify tempnotifyoff hidelines unlink askreg bigerror error timer badge spectator "
    "spectatorleave -hint -message player".split()) | {""}
"""Message kinds a server room writes into a battle's log beside the simulator's lines (pokemon-showdown 0.11.11
``server/room-battle.ts`` and ``rooms.ts``: joins and chat, the timer's ``|inactive|``, a forfeit's ``|-message|``,
its own ``|player|`` lines, ``||`` notices, ``|raw|`` rating changes). A recorded line of one of these kinds that the
replay does not have is the room's; a simulator line of these kinds must still be where the replay has it."""


class InputLogReplayer:
    """One Node process that replays input logs, started on first use and again after it dies."""

    def __init__(self, showdown: str | None = None, timeout_s: float = REPLAY_TIMEOUT_S):
        self.showdown, self.timeout_s = showdown, timeout_s
        self.proc: subprocess.Popen | None = None
        self.errors = None

    def _start(self) -> None:
        self.errors = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(["node", str(REPLAYER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.errors, env=node_env(self.showdown))
        except OSError as err:
            raise RuntimeError(f"cannot start the input-log replayer (Node.js and pokemon-showdown, `make setup`): "
                               f"{err}") from err

    def _ask(self, line: bytes) -> bytes | str:
        """The process's answer to one request line, or why there is none (it died, or took too long)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._lost("closed its input")
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(self.timeout_s):
                return self._lost(f"took longer than {self.timeout_s:.0f} s")
        answer = self.proc.stdout.readline()
        return answer if answer.endswith(b"\n") else self._lost("exited")

    def _lost(self, what: str) -> str:
        """Ends the process; says what happened, with the end of what it wrote to stderr."""
        self.close()
        self.errors.seek(0)
        tail = self.errors.read().decode(errors="replace")[-1500:]
        return f"the replayer process {what} (exit code {self.proc.returncode}): {tail}"

    def replay(self, input_log: list[str], teams: dict | None) -> dict:
        """The replay of one input log (see replay_input_log.js for its fields); an ``error`` where it failed on this
        input. Raises RuntimeError when the process cannot be started."""
        line = json.dumps({"input_log": input_log, "teams": teams}).encode() + b"\n"
        first = self._ask(line)
        if isinstance(first, bytes):
            return json.loads(first)
        again = self._ask(line)  # a fresh process: a second loss on the same input is the input's
        if isinstance(again, bytes):
            return json.loads(again)
        return {"error": f"replaying this input twice: {first}; then {again}"}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_REPLAYERS: dict[str | None, InputLogReplayer] = {}
_LOCK = threading.Lock()


def replay(input_log: list[str], teams: dict | None, showdown: str | None = None) -> dict:
    """``InputLogReplayer.replay`` on this process's replayer for ``showdown`` (a pokemon-showdown folder, default
    ``showdown_dir()``)."""
    with _LOCK:
        if showdown not in _REPLAYERS:
            _REPLAYERS[showdown] = InputLogReplayer(showdown)
        return _REPLAYERS[showdown].replay(input_log, teams)


@atexit.register
def _close_all() -> None:
    for replayer in _REPLAYERS.values():
        replayer.close()


def log_divergence(recorded: list[str], replayed: list[str]) -> str | None:
    """Where a server's recorded battle log and the replay's differ, or None when the replay is the recorded battle:
    every replayed line, in order, is the next line of the recorded log that the room did not add. Lines of the
    room's kinds (``ROOM_KINDS``) the replay lacks are skipped, as are the wall-clock ``|t:|`` lines and blank ones."""
    expected = [line for line in replayed if not line.startswith("|t:|")]
    at = 0
    for n, line in enumerate(recorded):
        if not line or line.startswith("|t:|"):
            continue
        if at < len(expected) and line == expected[at]:
            at += 1
            continue
        kind = line.split("|", 2)[1] if line.startswith("|") else ""
        if kind in ROOM_KINDS:
            continue
        want = repr(expected[at][:120]) if at < len(expected) else "the end of the battle"
        return f"line {n} of the recorded log is {line[:120]!r}, the replay has {want}"
    if at < len(expected):
        return f"the recorded log ends where the replay goes on with {expected[at][:120]!r}"
    return None
