"""The rating curve of a self-play run: every snapshot's Elo against the update it was taken at, and the learner's
rating after each update, drawn to a PNG next to the run's ``metrics.csv``.

    python training/selfplay_report.py --out runs/sp-pokemon            # → runs/sp-pokemon/ratings.png

Ratings are Elo relative to the league's anchor (its first weak bot, fixed at ``LeagueConfig.anchor_rating``): a
snapshot starts at the learner's rating when it is taken and moves only when the learner plays it.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import matplotlib

from pipelines.cli import parse_config
from shards_schema import storage
from training.checkpoints import read_checkpoint
from training.league import LeagueConfig
from training.loop import latest_checkpoint, local_run_folder


@dataclass(frozen=True, kw_only=True)
class ReportConfig:
    """Configuration of a self-play report.

    Attributes:
        out: the self-play run's --out (a local path or a URI): its latest checkpoint holds the league's ratings.
        png: where the figure goes, a local path or a URI (empty: ratings.png in the run's local folder, beside
            metrics.csv).
    """

    out: str
    png: str = ""


def snapshot_ratings(ratings: dict[str, float]) -> list[tuple[int, float]]:
    """(update, rating) of every snapshot in a league's ratings, by update."""
    return sorted((int(name.removeprefix("snapshot-")), float(r)) for name, r in ratings.items()
                  if name.startswith("snapshot-"))


def learner_ratings(metrics_csv: Path) -> list[tuple[int, float]]:
    """(update, learner's rating) from a run's metrics.csv; a resumed run's repeated updates keep their last row."""
    rows: dict[int, float] = {}
    with open(metrics_csv, newline="") as fh:
        for row in csv.DictReader(fh):
            rows[int(row["step"])] = float(row["learner_rating"])
    return sorted(rows.items())


def plot_ratings(snapshots: list[tuple[int, float]], learner: list[tuple[int, float]], anchor: str,
                 anchor_rating: float, png: str, title: str) -> None:
    """The figure as PNG at ``png`` (a local path or a URI)."""
    matplotlib.use("Agg")  # files only: no display on a cluster node or in CI
    # pyplot here, not at the top: the backend is chosen before pyplot is first imported, and only by a caller that
    # draws (importing this module leaves a notebook's backend alone)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    if learner:
        ax.plot(*zip(*learner, strict=True), color="tab:gray", linewidth=1, label="learner after each update")
    if snapshots:
        ax.plot(*zip(*snapshots, strict=True), "o-", color="tab:blue", markersize=3, label="snapshot (final rating)")
    ax.axhline(anchor_rating, color="tab:red", linestyle="--", linewidth=1, label=f"{anchor} (anchor)")
    ax.set_xlabel("PPO update")
    ax.set_ylabel("Elo")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    data = io.BytesIO()
    fig.savefig(data, format="png")
    plt.close(fig)
    storage.write_bytes(png, data.getvalue())


def report(cfg: ReportConfig, log=print) -> str:
    """Draw the run's rating curve; where the PNG went (a local path or a URI). Without the run's metrics.csv on
    this machine (rank 0 writes it where the learner ran) the learner's line is left out, and ``log`` says so."""
    out = storage.normalize(cfg.out)
    latest = latest_checkpoint(out)
    if latest is None:
        raise FileNotFoundError(f"no self-play checkpoint under {storage.join(out, 'ray')}")
    ckpt = read_checkpoint(latest)
    if "ratings" not in ckpt.extra:
        raise ValueError(f"{latest} is not a self-play checkpoint ({ckpt.kind})")
    folder = local_run_folder(out)
    metrics = folder / "metrics.csv"
    learner = learner_ratings(metrics) if metrics.exists() else []
    if not learner:
        log(f"[report] no learner ratings in {metrics} (metrics.csv is written on the machine the learner ran on): "
            "the figure shows the snapshots only; run the report there for the learner's line")
    png = storage.normalize(cfg.png) if cfg.png else str(folder / "ratings.png")
    league = LeagueConfig()  # both environments anchor on their random bot at the default rating
    plot_ratings(snapshot_ratings(ckpt.extra["ratings"]), learner, league.weak[0], league.anchor_rating, png,
                 f"{ckpt.kind}: snapshot ratings, update {ckpt.step}")
    return png


def main(argv: list[str] | None = None) -> None:
    print(report(parse_config(ReportConfig, argv)))


if __name__ == "__main__":
    main()
