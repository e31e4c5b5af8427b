"""The self-play data flywheel: a teacher's battles become shards, a policy learns from them offline, the policy's
own battles against a league become a new shard version, and the policy trains again on every version so far;
each round's data and checkpoint are versioned, and the ladder rates each round's policy. With ``--dagger`` the
teacher labels the policy's own decisions and the policy imitates those labels (DAgger).

    python training/pokemon/flywheel.py --out runs/flywheel --port 8123 --rounds 2 --teacher heuristic \
        --teacher-battles 1000 --policy-battles 500 --steps 2000 --objective exp_adv

Round 0 parses ``--teacher-battles`` battles per format of the teacher (a scripted player of the generator)
against each of ``--league`` (``--source generated``) and trains a policy on them (``--teacher-versions``: on
those published versions instead, e.g. one teacher's data for several seeds). Round k ≥ 1 parses
``--policy-battles`` battles per format of round k-1's checkpoint (playing through the simulator's stream, as it
plays on a server: ``training/pokemon/player.StreamPlayer``) against each of the league, and trains a new policy on
all versions so far (``--extra-shards``), from scratch or, with ``--fine-tune``, from round k-1's weights. After
each round the ladder (``training/pokemon/ladder.py``) plays the round's policy against poke-env's bots and the
teacher; ``flywheel.csv`` under ``--out`` has one row per round: its versions, its checkpoint (sha256) and its
win rates. Every version is an ordinary published version (manifest, quarantine, counts), named by its inputs:
a round's battles are a function of the seed and the weights that played them.

DAgger (``--dagger``, with ``--sides p1`` to train on the teacher's and the policy's decisions only): in round k ≥ 1
the teacher, reading the policy's first-person stream, records at each of the policy's decisions what it would
choose (the rows' ``teacher_action``, ``--p1-teacher``), and rounds k ≥ 1 train with ``--label teacher``: rows
the teacher labelled imitate the label (the states the policy reached by its own choices, the teacher's choice in
them), the others the action taken (the teacher's own battles of round 0; the league's side without ``--sides``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.cli import command_config
from pipelines.parse_replays import ParseConfig
from pipelines.parse_replays import run as parse
from pipelines.pokemon.generated import POLICIES, GeneratedConfig
from shards_schema import storage
from shards_schema.reader import open_version
from training import outputs
from training.pokemon import ladder
from training.pokemon.offline_rl import OBJECTIVES, TrainConfig
from training.pokemon.offline_rl import run as train
from training.pokemon.player import pinned_checkpoint


@dataclass(frozen=True, kw_only=True)
class FlywheelConfig:
    """Configuration of a flywheel run.

    Attributes:
        out: root folder (a path or a URI): shards under ``shards/``, each round's policy under ``round-<k>/policy``
            and its ladder under ``round-<k>/ladder``, ``flywheel.csv`` at the top.
        port: port of the ladder's local Showdown server (127.0.0.1).
        rounds: rounds after round 0 (the teacher's data): each plays, parses and trains once.
        teacher: the generator's scripted player whose battles start the wheel (random, heuristic, search).
        league: the generator's scripted players the teacher and every round's policy play against.
        formats: formats to play.
        teacher_battles: battles per format against each league player in round 0.
        teacher_versions: published versions (URIs) that round 0 trains on instead of playing the teacher's battles:
            one teacher's data shared by several seeds (``--seed`` then sets training and the later rounds' battles).
        policy_battles: battles per format against each league player in every later round.
        seed: seed of the battles (round k plays with seed + k) and of training.
        objective: bc, filtered_bc or exp_adv.
        policy_objective: the objective of rounds k >= 1, which train on the policy's own battles (empty:
            ``objective``): e.g. BC on the teacher in round 0, offline RL on every version after it.
        preset: the policy's size (tiny, small, medium, large).
        d_model: the policy's width replacing the preset's (0: the preset's).
        action_head: the policy's action head (linear, slots).
        steps: training steps per round.
        batch_size: windows per step.
        context: turns per window.
        lr: learning rate.
        sides: train on these player sides only (empty: both sides of every battle).
        fine_tune: start each round after round 0 from the previous round's weights (``--init-from``) instead of
            from scratch.
        dagger: the teacher labels the policy's decisions in rounds k >= 1 and those rounds train on the labels
            (``--label teacher``).
        ladder_battles: battles per pair and format in each round's ladder (0: no ladder).
        ladder_players: poke-env bots in each round's ladder (random is the anchor).
        num_parse_actors: parse actors of each parse job.
    """

    out: str
    port: int
    rounds: int = 2
    teacher: str = "heuristic"
    league: list[str] = field(default_factory=lambda: ["random", "heuristic"])
    formats: list[str] = field(default_factory=lambda: ["gen9randombattle"])
    teacher_battles: int = 1000
    teacher_versions: list[str] = field(default_factory=list)
    policy_battles: int = 500
    seed: int = 0
    objective: str = "exp_adv"
    policy_objective: str = ""
    preset: str = "small"
    d_model: int = 0
    action_head: str = "linear"
    steps: int = 2000
    batch_size: int = 32
    context: int = 32
    lr: float = 3e-4
    sides: list[str] = field(default_factory=list)
    fine_tune: bool = False
    dagger: bool = False
    ladder_battles: int = 100
    ladder_players: list[str] = field(default_factory=lambda: ["random", "maxbp", "heuristic"])
    num_parse_actors: int = 2

    def __post_init__(self):
        unknown = {self.teacher, *self.league} - set(POLICIES)
        if unknown:
            raise ValueError(f"--teacher and --league name the generator's players {list(POLICIES)}, not "
                             f"{sorted(unknown)}")
        if not self.league:
            raise ValueError("--league needs at least one player")
        if self.objective not in OBJECTIVES or self.policy_objective not in ("", *OBJECTIVES):
            raise ValueError(f"--objective and --policy-objective must be one of {OBJECTIVES}")
        if self.rounds < 0 or min(self.teacher_battles, self.policy_battles, self.steps) < 1:
            raise ValueError("need --rounds >= 0 and --teacher-battles, --policy-battles, --steps >= 1")
        if self.ladder_battles < 0 or self.ladder_battles % 2:
            raise ValueError("--ladder-battles must be even (half each side) or 0 (no ladder)")

    @classmethod
    def tiny(cls, *, out: str, port: int, **overrides) -> FlywheelConfig:
        fields = {"rounds": 1, "league": ["random"], "teacher_battles": 2, "policy_battles": 2, "preset": "tiny",
                  "steps": 4, "batch_size": 4, "context": 8, "ladder_battles": 0, "num_parse_actors": 1}
        return cls(out=out, port=port, **{**fields, **overrides})


def round_versions(cfg: FlywheelConfig, k: int, player: str, log) -> list[str]:
    """Round k's shard versions: ``player`` (the teacher, or round k-1's checkpoint) against each of the league."""
    versions = []
    battles = cfg.teacher_battles if k == 0 else cfg.policy_battles
    for opponent in cfg.league:
        options = GeneratedConfig(num_battles=battles, seed=cfg.seed + k, p1=player, p2=opponent,
                                  p1_teacher=cfg.teacher if cfg.dagger and k > 0 else None,
                                  battles_per_chunk=min(25, battles))
        job = ParseConfig(source="generated", out=storage.join(cfg.out, "shards"), formats=list(cfg.formats),
                          num_parse_actors=cfg.num_parse_actors, options=options)
        published = parse(job, log=log)
        versions.append(str(published.uri))
    return versions


def given_versions(uris: list[str]) -> tuple[list[str], str]:
    """``--teacher-versions``, each checked to be a published version (the reader's error names the fix), and who
    played them: each manifest's ``p1`` (a generated version's player), else the version's name."""
    players = []
    for uri in uris:
        config = open_version(uri, check_sha256=False).manifest.config
        players.append(str(config.get("p1") or storage.name(uri)))
    return list(uris), " ".join(dict.fromkeys(players))


def train_round(cfg: FlywheelConfig, k: int, versions: list[str], previous: str | None, log) -> str:
    """Round k's policy, trained on every version so far; its run folder."""
    out = storage.join(cfg.out, f"round-{k}", "policy")
    objective = cfg.policy_objective if k > 0 and cfg.policy_objective else cfg.objective
    train_cfg = TrainConfig(shards=versions[0], extra_shards=versions[1:], out=out, preset=cfg.preset,
                            d_model=cfg.d_model, action_head=cfg.action_head,
                            objective=objective, steps=cfg.steps, batch_size=cfg.batch_size, context=cfg.context,
                            lr=cfg.lr, seed=cfg.seed, sides=list(cfg.sides), checkpoint_every=cfg.steps,
                            label="teacher" if cfg.dagger and k > 0 else "action",
                            log_every=max(1, cfg.steps // 20), wandb_mode="disabled",
                            init_from=previous if cfg.fine_tune and previous else None)
    log(f"[flywheel] round {k}: training {objective}{' on teacher labels' if cfg.dagger and k else ''} on "
        f"{len(versions)} versions → {out}")
    train(train_cfg)
    return out


def ladder_round(cfg: FlywheelConfig, k: int, policy: str, log) -> dict[str, float]:
    """The round's policy against poke-env's bots and the teacher: its win rate against each, by format."""
    if not cfg.ladder_battles:
        return {}
    result = ladder.run(ladder.LadderConfig(
        out=storage.join(cfg.out, f"round-{k}", "ladder"), port=cfg.port, checkpoints=[policy],
        players=list(cfg.ladder_players), scripted=[cfg.teacher], battles_per_pair=cfg.ladder_battles,
        formats=list(cfg.formats), seed=cfg.seed), log=log)
    name = policy.rstrip("/")
    return {f"{r['format']} vs {r['column']}": float(r["win_rate"]) for r in result["matrix"] if r["row"] == name}


def run(cfg: FlywheelConfig, *, log=print) -> list[dict]:
    """Every round; the rows of ``flywheel.csv``."""
    versions: list[str] = []
    rows, previous, played_by = [], None, cfg.teacher
    for k in range(cfg.rounds + 1):
        if k == 0 and cfg.teacher_versions:
            given, played_by = given_versions(cfg.teacher_versions)
            versions += given
        else:
            versions += round_versions(cfg, k, cfg.teacher if k == 0 else previous, log)
        policy = train_round(cfg, k, versions, previous, log)
        state, sha256 = pinned_checkpoint(policy)
        rows.append({"round": k, "played_by": played_by if k == 0 else rows[-1]["checkpoint"],
                     "versions": " ".join(storage.name(v) for v in versions), "checkpoint": state,
                     "checkpoint_sha256": sha256, **ladder_round(cfg, k, policy, log)})
        outputs.write_csv(storage.join(cfg.out, "flywheel.csv"), rows)
        log(f"[flywheel] round {k} done: {rows[-1]}")
        previous = policy
    return rows


def main(argv: list[str] | None = None) -> None:
    run(command_config(FlywheelConfig, argv))


if __name__ == "__main__":
    main()

