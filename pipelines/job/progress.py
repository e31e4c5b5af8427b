"""What the job prints: the progress line while it runs (``ParseProgress``) and the summary at its end, with the
next commands to run."""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time

from pipelines import stages
from pipelines.console import eta_s, progress_line
from pipelines.writer.naming import BYTES_PER_MIB


class ParseProgress:
    """The job's progress line, from a thread while the job runs and once at its end: inputs read of the plan's
    total (where every work item says how many it holds; else the share of the plan's input bytes read), inputs
    parsed and written, rows, rows/s, quarantined so far and an ETA from the share read (reading runs ahead of
    parsing only as far as Ray Data's buffers let it). ``read_so_far()``: the planned bytes and inputs read so far
    (``ReadProgress.snapshot``)."""

    def __init__(self, plan: stages.Plan, group_bytes: float, read_so_far, publisher, ticker):
        self.total_inputs = plan.num_inputs()
        self.total_bytes = sum(stages.planned_bytes(item, group_bytes) for item in plan.items)
        self.read_so_far, self.publisher, self.ticker = read_so_far, publisher, ticker
        self.reused_inputs = self.reused_rows = 0  # of reused tasks (--reuse-from): not parsed by this job
        self.start = time.monotonic()
        self.stop = None

    def line(self) -> str:
        read_bytes, read_inputs = self.read_so_far()
        share = min(read_bytes / self.total_bytes, 1.0) if self.total_bytes else 1.0
        elapsed_s = time.monotonic() - self.start
        p = self.publisher
        inputs, rows = p.inputs - self.reused_inputs, p.rows - self.reused_rows
        parsed = f"{inputs:,} parsed"
        if self.total_inputs:
            read_inputs = min(read_inputs, self.total_inputs)
            fields = {"": parsed}
        else:  # archives and row groups hold an unknown number of inputs until read: their bytes tell the share
            fields = {"": f"{100.0 * share:.0f}% of the input bytes", "parsed": f"{inputs:,}"}
        fields |= {"rows": f"{rows:,}", "rows/s": f"{rows / max(elapsed_s, 1e-9):,.0f}",
                   "quarantined": f"{sum(p.quarantined.values()):,}"}
        if self.reused_inputs:
            fields["reused"] = f"{self.reused_inputs:,} inputs"
        return progress_line("parse", read_inputs, self.total_inputs, "inputs read", fields,
                             eta_s(share, 1.0, elapsed_s))

    def __enter__(self):
        self.stop = threading.Event()

        def every():
            while not self.stop.wait(max(self.ticker.every_s, 0.2)):
                self.ticker.show(self.line())

        self.thread = threading.Thread(target=every, daemon=True, name="parse-progress")
        self.thread.start()
        return self

    def __exit__(self, kind, value, traceback):
        self.stop.set()
        self.thread.join()
        if kind is None:
            self.ticker.show(self.line(), final=True)
        else:
            self.ticker.end()


def next_steps(parser: type[stages.Parser], uri: str) -> list[str]:
    """The summary's closing lines: each next command of the parser's dataset (``Parser.next_steps``), runnable as
    printed."""
    try:
        cwd = os.getcwd()
    except FileNotFoundError:  # under `ray job submit` the job's working folder may be gone once the job is done
        cwd = None
    python = os.path.relpath(sys.executable, cwd) if cwd and sys.executable.startswith(cwd + os.sep) \
        else sys.executable
    lines = []
    for what, command in parser.next_steps:
        lines.append(f"[parse] {what + ':':21s} " + command.format(uri=shlex.quote(uri), python=shlex.quote(python)))
    return lines


def summary(published, parser: type[stages.Parser], elapsed_s: float, log, *, reused_rows: int = 0) -> None:
    m = published.manifest
    c = m.counts
    total_mib = sum(f.bytes for f in m.files) / BYTES_PER_MIB
    log(f"[parse] inputs {c.inputs} = written {c.written} + filtered {sum(c.filtered.values())} "
        f"+ quarantined {sum(c.quarantined.values())}")
    for kind, reasons in (("filtered", c.filtered), ("quarantined", c.quarantined)):
        for reason, n in reasons.items():
            log(f"[parse]   {kind} {reason}: {n}")
    reused = f" ({reused_rows} rows reused, not counted)" if reused_rows else ""
    log(f"[parse] {parser.describe(c)} in {len(m.files)} shards ({total_mib:.1f} MiB), "
        f"{(c.rows - reused_rows) / max(elapsed_s, 1e-9):.0f} rows/s over {elapsed_s:.1f}s{reused}")
    log("[parse] " + ("already published with identical contents: " if published.reused else "published: ")
        + f"{m.dataset}/{m.version}")
    for line in next_steps(parser, published.uri):
        log(line)
    log(published.uri)
