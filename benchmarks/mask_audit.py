"""The ``generated`` source's legal masks against the server's requests, decision by decision.

    python benchmarks/mask_audit.py --num-battles 100 --out benchmarks/results/mask-audit-2026-11-26

Plays battles with the real simulator (``pipelines/pokemon/generated.py``: heuristic vs random by default) and, for
every decision request of both players' streams, renders the row's state and mask as the parser does
(``pov.decisions``), then compares the mask with the request's choices (``pov.unmasked_choices``, the same audit the
live player runs against the server) and checks that the recorded choice's action is inside the mask. Prints, per
format: decisions, decisions whose mask differs from the request (by reason), actions outside the mask, recorded
choices that are no action (-1, by the kind of choice), and the decisions of the two kinds ``pov.py`` maps by rule
(a sole non-team move beside switches: Struggle, gen 1's Fight; Revival Blessing's fainted targets). ``--out``
writes ``summary.csv`` (one row per format) and ``reasons.csv`` (format, what, reason, decisions).
"""

from __future__ import annotations

import collections
import csv
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.cli import command_config
from pipelines.pokemon import generated
from pipelines.pokemon.dex import gen_of_format, load_dex
from pipelines.pokemon.pov import decisions, is_reviving

FORMATS = ("gen1ou", "gen4randombattle", "gen8randombattle", "gen9randombattle")


@dataclass(frozen=True, kw_only=True)
class AuditConfig:
    """What the audit plays.

    Attributes:
        formats: formats to generate battles in.
        num_battles: battles per format.
        seed: the generator's seed.
        p1: policy of player 1 (random or heuristic).
        p2: policy of player 2 (random or heuristic).
        battles_per_chunk: battles per simulator process.
        out: folder to write ``summary.csv`` and ``reasons.csv`` in (nothing written when empty).
    """

    formats: list[str] = field(default_factory=lambda: list(FORMATS))
    num_battles: int = 100
    seed: int = 0
    p1: str = "heuristic"
    p2: str = "random"
    battles_per_chunk: int = 25
    out: str = ""

    def __post_init__(self):
        generated.GeneratedConfig(num_battles=self.num_battles, seed=self.seed, p1=self.p1, p2=self.p2,
                                  battles_per_chunk=self.battles_per_chunk)  # the same checks

    @classmethod
    def tiny(cls, **overrides) -> AuditConfig:
        return cls(**{"formats": ["gen9randombattle", "gen1ou"], "num_battles": 4, "battles_per_chunk": 4,
                      **overrides})


@dataclass
class Audit:
    """Counts of one format's decisions."""

    battles: int = 0
    decisions: int = 0
    mismatched: int = 0  # decisions whose mask differs from the request's choices
    outside: int = 0  # recorded actions outside the mask
    reasons: collections.Counter = field(default_factory=collections.Counter)  # mismatch reason → decisions
    no_action: collections.Counter = field(default_factory=collections.Counter)  # kind of choice → decisions at -1
    outside_examples: list[str] = field(default_factory=list)
    sole_moves: collections.Counter = field(default_factory=collections.Counter)  # move → decisions (action 0)
    revivals: int = 0


def audit_record(record: dict, audit: Audit) -> None:
    """Add both players' decisions of one generated battle record to ``audit``."""
    dex = load_dex(gen_of_format(record["format"]))
    audit.battles += 1
    for side in ("p1", "p2"):
        _, steps, turns = decisions(record, side, dex)
        for (_, mask, decision), turn in zip(steps, turns, strict=True):
            audit.decisions += 1
            reasons = decision.unmasked()
            audit.mismatched += bool(reasons)
            audit.reasons.update(reasons)
            if decision.sole is not None:
                audit.sole_moves[decision.sole] += 1
            audit.revivals += is_reviving(decision.request)
            action = decision.action()
            if action < 0:
                words = (decision.choice or "").split()
                listed = ((decision.request.get("active") or [{}])[0].get("moves", []))
                kind = words[0] if words else "none"
                if kind == "move" and len(words) > 1 and words[1].isdigit() and int(words[1]) <= len(listed):
                    kind = f"move {listed[int(words[1]) - 1]['id']}"
                audit.no_action[f"{kind}, {'empty mask' if not any(mask) else 'mask not empty'}"] += 1
            elif action >= len(mask) or not mask[action]:
                audit.outside += 1
                if len(audit.outside_examples) < 5:
                    audit.outside_examples.append(f"{record['battle_id']} {side} turn {turn}: {decision.choice!r} → "
                                                  f"{action}")


def run(cfg: AuditConfig, *, log=print) -> dict[str, Audit]:
    audits = {}
    for fmt in cfg.formats:
        audit = audits[fmt] = Audit()
        start = time.monotonic()
        for chunk in generated.chunks([fmt], cfg.num_battles, cfg.seed, cfg.p1, cfg.p2, cfg.battles_per_chunk):
            for _, payload in generated.generate(chunk):
                audit_record(json.loads(payload), audit)
        log(f"{fmt}: {audit.battles} battles, {audit.decisions} decisions, {audit.mismatched} masks ≠ request, "
            f"{audit.outside} actions outside the mask ({time.monotonic() - start:.0f} s)")
        for reason, count in audit.reasons.most_common():
            log(f"  mask≠request {count}× {reason}")
        for example in audit.outside_examples:
            log(f"  outside the mask: {example}")
        for kind, count in audit.no_action.most_common():
            log(f"  no action (-1) {count}× {kind}")
        for move, count in audit.sole_moves.most_common():
            log(f"  {move} beside switches (action 0): {count}")
        if audit.revivals:
            log(f"  Revival Blessing (switch actions name fainted targets): {audit.revivals}")
    if cfg.out:
        write_csv(audits, cfg, Path(cfg.out))
        log(f"wrote {cfg.out}/summary.csv and {cfg.out}/reasons.csv")
    return audits


def write_csv(audits: dict[str, Audit], cfg: AuditConfig, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["format", "battles", "seed", "p1", "p2", "decisions", "mask_mismatches", "actions_outside_mask",
                    "no_action", "sole_move_decisions", "revival_decisions"])
        for fmt, a in audits.items():
            w.writerow([fmt, a.battles, cfg.seed, cfg.p1, cfg.p2, a.decisions, a.mismatched, a.outside,
                        sum(a.no_action.values()), sum(a.sole_moves.values()), a.revivals])
    with open(out / "reasons.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["format", "what", "reason", "decisions"])
        for fmt, a in audits.items():
            for what, counter in (("mask_mismatch", a.reasons), ("no_action", a.no_action),
                                  ("sole_move", a.sole_moves)):
                for reason, count in sorted(counter.items()):
                    w.writerow([fmt, what, reason, count])


def main(argv: list[str] | None = None) -> None:
    run(command_config(AuditConfig, argv))


if __name__ == "__main__":
    main()
