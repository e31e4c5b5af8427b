"""The line protocol between ``replay_parse_speed.py`` and the parsers it runs in child processes
(``metamon_parse_worker.py``, ``poke_env_parse_worker.py``). Standard library only: it runs under Metamon's
interpreter too.

One JSON document a line on stdin: ``{"load": path}`` names a JSON file holding the replays (a list in the public
replay JSON shape); ``{"parse": [i, ...]}`` parses those of them, and one line comes back on the original stdout:
``[[ok, cpu_s, count, error], ...]``, one entry per index. ``cpu_s`` is the worker's CPU time of the parse call only
(``time.process_time`` around it), with Python's default gc on; ``count`` is what the parse returned (states or
snapshots); ``error`` names a refusal.
"""

from __future__ import annotations

import json
import os
import sys
import time


def protocol_stream():
    """The original stdout, for protocol lines only: from now on anything printed goes to stderr."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr
    return out


def serve(out, parse, refusals: tuple[type[BaseException], ...] = ()) -> None:
    """Answer the protocol on stdin until it closes; ``parse(replay)`` returns a count, or raises one of
    ``refusals`` for a replay it refuses."""
    replays: list[dict] = []
    for line in sys.stdin:
        message = json.loads(line)
        if "load" in message:
            with open(message["load"]) as f:
                replays = json.load(f)
            continue
        results = []
        for i in message["parse"]:
            start = time.process_time()
            try:
                count = parse(replays[i])
            except refusals as err:
                results.append([False, time.process_time() - start, 0, f"{type(err).__name__}: {err}"[:300]])
                continue
            results.append([True, time.process_time() - start, count, None])
        out.write(json.dumps(results) + "\n")
        out.flush()
