"""Self-play in real Pokémon battles, measured before and after: win rates with 95% intervals and the snapshots'
rating curve.

    python benchmarks/pokemon_selfplay_experiment.py --work-dir /tmp/sp-scratch --updates 100     # from scratch
    python benchmarks/pokemon_selfplay_experiment.py --work-dir /tmp/sp-ft --opponents heuristic \\
        --policy-init RUN/ray/.../checkpoint_000500 --updates 300 --strong-share 0.3 \
        --reference-kl 0.05 --critic-warmup-updates 10                                            # fine-tuned
    python benchmarks/pokemon_selfplay_experiment.py ... --policy-init CKPT --lr 1e-4 --encoder-lr 1e-5 \\
        --reward-knockout-dealt 0.05 --reward-knockout-taken 0.05 --reward-hp-swing 0.2 \\
        --reward-keep-optimum                                            # fine-tuned: dense terms, trained encoder

1. "before": the policy the run starts from, written as a step-0 self-play checkpoint exactly as the learner builds
   it (from scratch: an untrained policy on an untrained frozen encoder; with ``--policy-init``: the offline-RL
   policy's actor head under zero-started residuals, which must choose as the offline-RL policy does), evaluated
   in ``--battles`` battles per opponent on a local Showdown server (greedy, as ``training/pokemon/evaluate.py`` plays);
2. ``training/selfplay.py --env pokemon`` for ``--updates`` PPO updates (timed);
3. "after": the run's last checkpoint, evaluated the same way (``--play sampled``: also playing actions drawn from
   the policy, as the runners do, rather than its most likely one); with ``--policy-init``, the offline-RL checkpoint
   itself too, so the step-0 claim is checked in battles, not assumed;
4. the rating curve (``training/selfplay_report.py``) as ``ratings.png`` and every figure in ``results.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from models.ppo_policy import RecurrentPolicy
from shards_schema import storage
from training.checkpoints import payload, state_file
from training.pokemon.evaluate import EvalConfig
from training.pokemon.evaluate import run as play
from training.pokemon.showdown_server import free_port
from training.selfplay import SelfPlayConfig, run_to_end
from training.selfplay_report import ReportConfig, report


def initial_checkpoint(cfg, path: Path) -> Path:
    """The policy a run of ``cfg`` starts from, as a step-0 self-play checkpoint (the learner's own construction:
    seed, policy, ``start_policy``; ``training/selfplay.train_loop_per_worker``)."""
    env = cfg.environment()
    torch.manual_seed(cfg.seed)
    policy = RecurrentPolicy(env.policy_config())
    env.start_policy(policy)
    state = payload(kind=env.kind, model_config=policy.cfg, train_config=cfg, step=0, data=env.identity(),
                    model=policy, optimizer=None, extra=env.extra())
    path.mkdir(parents=True, exist_ok=True)
    torch.save({**state, "rng": []}, path / "state.pt")
    return path / "state.pt"


def evaluate(checkpoint: str, args, label: str, sample: bool = False) -> list[dict]:
    label += " (sampled)" if sample else ""
    print(f"[experiment] evaluating {label}: {checkpoint}")
    rows = play(EvalConfig(checkpoint=checkpoint, port=free_port(), battles=args.battles, formats=[args.format],
                           opponents=args.opponents, concurrency=4, sample=sample, sample_seed=args.seed,
                           temperature=args.temperature if sample else 1.0))
    return [{"policy": label, "play": "sampled" if sample else "greedy",
             **{k: v for k, v in r.items() if k != "fallback_reasons"}} for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", default="/tmp/replayforge_selfplay_experiment")
    parser.add_argument("--policy-init", default="", help="offline-RL checkpoint to fine-tune (empty: from scratch)")
    parser.add_argument("--updates", type=int, default=100, help="PPO updates")
    parser.add_argument("--num-runners", type=int, default=2)
    parser.add_argument("--battles-per-runner", type=int, default=8, help="battles per runner and update")
    parser.add_argument("--snapshot-every", type=int, default=10)
    parser.add_argument("--encoder-preset", default="small", help="from scratch: the untrained encoder's size")
    parser.add_argument("--format", default="gen9randombattle")
    parser.add_argument("--opponents", nargs="+", default=["random"], help="evaluation opponents")
    parser.add_argument("--battles", type=int, default=200, help="evaluation battles per opponent")
    parser.add_argument("--play", nargs="+", default=["greedy"], choices=["greedy", "sampled"],
                        help="how the end policy is evaluated: its most likely action, and/or actions drawn from it "
                             "at --temperature (the stochastic policy PPO trains)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="the learner acts from softmax(logits / temperature), the policy PPO trains")
    parser.add_argument("--strong-share", type=float, default=0.15,
                        help="share of games against the strong bots (snapshots get 0.95 minus it, RandomPlayer 0.05)")
    parser.add_argument("--reference-kl", type=float, default=0.0,
                        help="with --policy-init: weight of the KL penalty to the offline-RL policy")
    parser.add_argument("--critic-warmup-updates", type=int, default=0, help="updates that train the critic alone")
    parser.add_argument("--lr", type=float, default=0.0, help="learning rate at update 0 (0: the preset's)")
    parser.add_argument("--encoder-lr", type=float, default=0.0,
                        help="learning rate of the turn encoder, trained with the policy (0: frozen)")
    parser.add_argument("--reward-knockout-dealt", type=float, default=0.0, help="dense reward per knockout dealt")
    parser.add_argument("--reward-knockout-taken", type=float, default=0.0, help="dense penalty per knockout taken")
    parser.add_argument("--reward-hp-swing", type=float, default=0.0, help="dense reward per unit of HP swing")
    parser.add_argument("--reward-keep-optimum", action="store_true",
                        help="shape the dense terms as potential differences (the result's optimal policy kept)")
    parser.add_argument("--no-start-evaluation", action="store_true",
                        help="evaluate only the end (the start was measured in an earlier run of the same start)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    work = Path(args.work_dir)
    cfg = SelfPlayConfig.from_flags(
        out=str(work / "run"), env="pokemon", policy_init=args.policy_init, preset="full", updates=args.updates,
        num_runners=args.num_runners, battles_per_runner=args.battles_per_runner, snapshot_every=args.snapshot_every,
        encoder_preset=args.encoder_preset, battle_format=args.format, seed=args.seed,
        snapshot_share=round(0.95 - args.strong_share, 9), strong_share=args.strong_share, weak_share=0.05,
        reference_kl=args.reference_kl, critic_warmup_updates=args.critic_warmup_updates, lr=args.lr,
        encoder_lr=args.encoder_lr,
        reward_knockout_dealt=args.reward_knockout_dealt, reward_knockout_taken=args.reward_knockout_taken,
        reward_hp_swing=args.reward_hp_swing, reward_keep_optimum=args.reward_keep_optimum,
        temperature=args.temperature, wandb_mode="disabled")
    rows = []
    if args.policy_init and not args.no_start_evaluation:
        rows += evaluate(state_file(storage.normalize(args.policy_init)), args, "offline-RL checkpoint")
    if not args.no_start_evaluation:
        rows += evaluate(str(initial_checkpoint(cfg, work / "step0")), args, "self-play, step 0")
    last, train_s = run_to_end(cfg)
    for mode in args.play:
        rows += evaluate(state_file(last), args, f"self-play, update {args.updates}", sample=mode == "sampled")
    png = report(ReportConfig(out=cfg.out, png=str(work / "ratings.png")))

    print(f"\nself-play: {args.updates} updates × {args.num_runners * args.battles_per_runner} battles in "
          f"{train_s / 60:.1f} min ({'from ' + args.policy_init if args.policy_init else 'from scratch'})")
    print(f"{'policy':38s} {'opponent':10s} {'battles':>7s} {'win rate':>9s}  95% interval")
    for r in rows:
        print(f"{r['policy']:38s} {r['opponent']:10s} {r['battles']:7d} {r['win_rate']:9.1%}  "
              f"[{r['ci_low']:.1%}, {r['ci_high']:.1%}]")
    print(f"rating curve: {png}")
    (work / "results.json").write_text(json.dumps({"args": vars(args), "train_s": train_s, "checkpoint": last,
                                                   "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
