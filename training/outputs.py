"""The files runs, ladders and sweeps write beside their results: CSV tables, text and PNG figures, at a local path
or a URI (``shards_schema.storage``), and matplotlib on its file-only backend. Training and the sweep drivers both
write through these."""

from __future__ import annotations

import csv
import io

from shards_schema import storage


def write_csv(uri: str, rows: list[dict]) -> None:
    """``rows`` as CSV at ``uri`` (a local path or a URI), columns in the first row's order."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    storage.write_bytes(uri, text.getvalue().encode())


def write_text(uri: str, text: str) -> None:
    storage.write_bytes(uri, text.encode())


def png_bytes(fig) -> bytes:
    """A matplotlib figure as PNG bytes (then closed), for ``storage.write_bytes``."""
    data = io.BytesIO()
    fig.savefig(data, format="png")
    pyplot().close(fig)
    return data.getvalue()


def pyplot():
    """matplotlib's pyplot on the Agg backend: files only, no display on a cluster node or in CI."""
    # Here, not at the top: the backend is chosen before pyplot is first imported, and only by a caller that draws
    # (importing this module leaves a notebook's backend alone); pyplot is also 0.8 s to import
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
