"""Train the Pokémon policy offline on a ``pokemon_turns`` shard version with Ray Train.

    python training/pokemon/offline_rl.py --shards OUT/pokemon_turns/<version> --out runs/bc --preset small
    python training/pokemon/offline_rl.py --tiny --shards ... --out ... --objective filtered_bc
    python training/pokemon/offline_rl.py --shards OUT/pokemon_turns/<v1> --extra-shards OUT/pokemon_turns/<v2> ...

Objectives: ``bc`` (behaviour cloning), ``filtered_bc`` (imitate actions whose advantage under the multi-gamma
critic is positive) and ``exp_adv`` (advantage-weighted, exp(A/β) clipped); the critics learn, for every discount
factor, Monte Carlo returns of the whole trajectory, λ-returns or one-step TD targets (``--critic-target``) in all
three (for ``bc`` they are trained beside, not used). bf16 autocast and TF32 on
CUDA, fp32 on CPU; DDP across workers. The loop, resume and checkpoints are ``training/fit.py``'s (self-describing:
``training/checkpoints.py``); this file holds the policy's windows, batch and losses. Metrics go to
``OUT/metrics.csv`` and to Weights & Biases (offline unless logged in).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from models.pokemon_policy import ACTION_HEADS, CRITIC_TRUNKS, PolicyConfig
from pipelines.pokemon.observation import vocabulary
from training import losses
from training.fit import Recipe, TrainerConfig, fit
from training.fit import main as fit_main
from training.pokemon.windows import LoadTurnWindows, teacher_labelled_turns, window_specs
from training.windows import first_windows, open_shards

OBJECTIVES = ("bc", "filtered_bc", "exp_adv")
CRITIC_TARGETS = ("td", "mc", "lambda")
ADVANTAGE_BASELINES = ("mean", "max", "zero")
ADVANTAGE_TARGETS = ("q", "return")
LABELS = ("action", "teacher")


@dataclass(frozen=True, kw_only=True)
class TrainConfig(TrainerConfig):
    """Configuration of offline training (the shared fields are ``training/fit.TrainerConfig``'s).

    Attributes:
        preset: model size: tiny, small, medium or large.
        objective: bc, filtered_bc or exp_adv.
        critic_weight: weight of the critic loss.
        critic_target: what the critics regress Q(s, a) on: ``mc``, the trajectory's discounted return from that
            decision to its end (the battle's result is known for every row; ``training/returns.py``); ``lambda``,
            λ-returns over the window that bootstrap from the critic's own values and take the Monte Carlo return
            past the window's end (``losses.lambda_returns``); ``td``, one-step targets r + γ V(s') inside the window
            (the window's last step has none).
        critic_lambda: λ of ``--critic-target lambda`` (1: Monte Carlo; 0: one-step inside the window).
        reward_hp: weight of the dense HP reward (HP fraction taken from the foe's active minus the own active's
            lost, per turn) added to the battle's result (``training/pokemon/rewards.py``); 0: the result alone.
        reward_faint: weight of the dense faint reward (foe's Pokémon fainted minus own, per turn); 0: none.
        advantage_gamma: index of the discount factor whose advantage weighs the actor.
        advantage_baseline: what A = target - baseline subtracts: ``mean``, V(s) = Σ π(a'|s) Q(s, a') under the
            policy being trained; ``max``, the best legal action's Q (``losses.best_legal_values``); ``zero``,
            nothing (A is the target itself).
        advantage_target: what the taken action is worth in A = target - baseline: ``q``, the critic's Q(s, a);
            ``return``, the decision's own discounted return to the end of its trajectory (the loader's Monte Carlo
            returns, whatever ``critic_target`` the critics learn), as advantage-weighted regression (AWR) weighs.
            ``return`` with the ``zero`` baseline weighs each decision by how its battle went from there on.
        exp_beta: temperature of exp_adv weights.
        critic_warmup_steps: the first steps, during which the actor of filtered_bc and exp_adv trains by plain BC
            (every weight 1) while the critics fit their targets; the objective's weights from then on (0: from the
            first step). A critic that starts untrained on its targets (a fresh head, or one fine-tuned from a
            checkpoint whose critics learned other returns) gives advantages that are noise, and exp(A / β) at a
            small β turns that noise into weights of 0 or the clip.
        sides: train only on trajectories of these player sides (e.g. ``p1`` when p1 is the player to imitate).
        validation_share: share of battles held out for validation, both sides of a battle together (0: none, every
            battle trains).
        eval_every: steps between validations (and at the end).
        max_eval_windows: validation windows used (the first of the held-out battles, in a fixed order).
        train_share: share of the training battles trained on (a seeded hash of the battle id; the held-out battles
            stay the same whatever the share): the data axis of a scaling sweep.
        d_model: model width replacing the preset's, the feed-forward and heads scaled with it (0: the preset's):
            the size axis of a scaling sweep.
        action_head: ``linear`` (each action a linear read of the turn vector) or ``slots`` (each action also
            scored from its own move's or switch target's words and numbers: ``models.pokemon_policy.ActionSlots``).
        critic_trunk: ``shared`` (the critics read the actor's turn vectors) or ``own`` (a trunk of the critic's
            own, of the same shapes: ``models.pokemon_policy.CriticTrunk``).
        critic_context: the own critic trunk's attention span in turns per layer, its own turn included (0: the
            whole window; 1: the current turn only; ``PolicyConfig.critic_context``). Needs ``--critic-trunk own``.
        label: what the actor imitates: ``action``, the action the player took; ``teacher``, the row's
            ``teacher_action`` where a teacher labelled the decision (a generated battle's ``--p1-teacher``) and the
            action taken where none did, so a teacher's own battles and a learner's labelled ones train together
            (DAgger). The actor loss, its accuracy and the turns it scores follow the label; the critics learn Q of
            the action taken either way (the returns follow it).
    """

    preset: str = "small"
    objective: str = "bc"
    critic_weight: float = 0.5
    critic_target: str = "td"
    critic_lambda: float = 0.9
    reward_hp: float = 0.0
    reward_faint: float = 0.0
    advantage_gamma: int = 2
    advantage_baseline: str = "mean"
    advantage_target: str = "q"
    exp_beta: float = 1.0
    critic_warmup_steps: int = 0
    sides: list[str] = field(default_factory=list)
    validation_share: float = 0.0
    eval_every: int = 500
    max_eval_windows: int = 512
    train_share: float = 1.0
    d_model: int = 0
    action_head: str = "linear"
    critic_trunk: str = "shared"
    critic_context: int = 0
    label: str = "action"

    def __post_init__(self):
        super().__post_init__()
        if self.objective not in OBJECTIVES:
            raise ValueError(f"--objective must be one of {OBJECTIVES}")
        if self.advantage_baseline not in ADVANTAGE_BASELINES:
            raise ValueError(f"--advantage-baseline must be one of {ADVANTAGE_BASELINES}")
        if self.advantage_target not in ADVANTAGE_TARGETS:
            raise ValueError(f"--advantage-target must be one of {ADVANTAGE_TARGETS}")
        if self.advantage_target == "return" and self.label == "teacher":
            raise ValueError("--advantage-target return weighs the action taken by what followed it; a teacher's "
                             "label has no return of its own: use --advantage-target q with --label teacher")
        if self.critic_target not in CRITIC_TARGETS:
            raise ValueError(f"--critic-target must be one of {CRITIC_TARGETS}")
        if not 0.0 <= self.critic_lambda <= 1.0:
            raise ValueError("--critic-lambda is in [0, 1]")
        if not 0.0 <= self.validation_share < 1.0:
            raise ValueError("--validation-share is a share in [0, 1)")
        if min(self.eval_every, self.max_eval_windows) < 1:
            raise ValueError("--eval-every and --max-eval-windows must be >= 1")
        if not 0.0 < self.train_share <= 1.0:
            raise ValueError("--train-share is a share in (0, 1]")
        if self.d_model < 0:
            raise ValueError("--d-model must be >= 0 (0: the preset's width)")
        if self.action_head not in ACTION_HEADS:
            raise ValueError(f"--action-head must be one of {ACTION_HEADS}")
        if self.critic_trunk not in CRITIC_TRUNKS:
            raise ValueError(f"--critic-trunk must be one of {CRITIC_TRUNKS}")
        if self.critic_context < 0 or (self.critic_context and self.critic_trunk != "own"):
            raise ValueError(f"--critic-context is a number of turns >= 0 for --critic-trunk own (got "
                             f"{self.critic_context} with --critic-trunk {self.critic_trunk}): the shared trunk's "
                             "context is the actor's")
        if not 0 <= self.critic_warmup_steps <= self.steps:
            raise ValueError(f"--critic-warmup-steps is in [0, --steps={self.steps}], not {self.critic_warmup_steps}")
        if self.label not in LABELS:
            raise ValueError(f"--label must be one of {LABELS} (got {self.label!r}): `action` imitates what the "
                             "player did, `teacher` the teacher's labels where the shards have them")

    @classmethod
    def tiny(cls, *, shards: str, out: str, **overrides) -> TrainConfig:
        fields = {"preset": "tiny", "context": 8, "batch_size": 8, "steps": 12, "checkpoint_every": 4,
                  "log_every": 2, "wandb_mode": "disabled", **overrides}
        return cls(shards=shards, out=out, **fields)


def compute_losses(model, batch, cfg: TrainConfig, gammas, step: int | None = None):
    """(total, actor, critic, accuracy, turns that reach the loss) of one batch, as tensors (the math lives in
    training/losses.py). ``step`` (0-based) below ``cfg.critic_warmup_steps`` trains the actor by BC; None: the
    objective's loss (validation)."""
    out = model(batch["tokens"], batch["numeric"], batch["legal"], batch["valid"])
    action = batch["action"]
    targets, target_mask = critic_targets(batch, out.values.detach().float(), gammas, cfg)
    critic = losses.critic_loss(out.q_values.float(), action, targets, step_mask(batch) & target_mask)
    label = label_actions(batch, cfg.label)  # what the actor imitates
    mask = step_mask(batch, label)
    if cfg.objective == "bc" or (step is not None and step < cfg.critic_warmup_steps):
        actor = losses.behaviour_cloning_loss(out.logits, label, mask)
    else:
        # the advantage of the imitated action: A(s, label)
        adv = advantage(out, {**batch, "action": label}, cfg.advantage_baseline,
                        cfg.advantage_target)[..., cfg.advantage_gamma]
        weights = (losses.filtered_bc_weights(adv) if cfg.objective == "filtered_bc"
                   else losses.exp_advantage_weights(adv, beta=cfg.exp_beta))
        actor = losses.weighted_actor_loss(out.logits, label, weights, mask)
    predicted = out.logits.argmax(-1)
    accuracy = ((predicted == label) & mask).sum() / mask.sum().clamp(min=1)
    return actor + cfg.critic_weight * critic, actor, critic, accuracy, mask.sum()


def label_actions(batch: dict, label: str):
    """(B, T) the action the actor imitates at each turn (``TrainConfig.label``): the action taken (``action``), or
    the teacher's where one labelled the turn and the action taken where none did (``teacher``). Tensors in the
    loss, numpy arrays in ``PolicyRecipe.samples`` (the loader's batch)."""
    if label == "action":
        return batch["action"]
    teacher = batch["teacher_action"]
    where = np.where if isinstance(teacher, np.ndarray) else torch.where
    return where(teacher >= 0, teacher, batch["action"])


def advantage(out, batch: dict, baseline: str, target: str = "q") -> torch.Tensor:
    """A(s, a) of the batch's actions, (B, T, G): ``target`` (``TrainConfig.advantage_target``: the critic's Q of
    the action, or the batch's ``returns``, which are those of the action taken) minus ``baseline``
    (``TrainConfig.advantage_baseline``)."""
    q = out.q_values.float()
    if baseline == "mean":
        values = out.values.float()
    elif baseline == "max":
        values = losses.best_legal_values(q, batch["legal"])
    else:
        values = torch.zeros(q.shape[:-1], dtype=q.dtype, device=q.device)
    if target == "return":
        return batch["returns"].float() - values
    return losses.advantages(q, values, batch["action"])


def critic_targets(batch: dict, values: torch.Tensor, gammas: torch.Tensor, cfg: TrainConfig):
    """(targets (B, T, G), steps that have one (B, T)) of ``cfg.critic_target`` for a batch; ``values`` (B, T, G) are
    the critic's own V(s), held fixed. ``mc`` and ``lambda`` read the batch's ``returns`` (``LoadTurnWindows`` with
    the model's discount factors)."""
    valid = batch["valid"]
    if cfg.critic_target == "mc":
        return batch["returns"].float(), valid
    # the next row's reward, done and V: what one-step and λ-returns bootstrap from
    next_valid = torch.zeros_like(valid)
    next_valid[:, :-1] = valid[:, 1:]
    next_values = torch.zeros_like(values)
    next_values[:, :-1] = values[:, 1:]
    next_reward = torch.zeros_like(batch["reward"])
    next_reward[:, :-1] = batch["reward"][:, 1:]
    next_done = torch.ones_like(batch["done"])
    next_done[:, :-1] = batch["done"][:, 1:]
    if cfg.critic_target == "td":
        return losses.td_targets(next_reward, next_done, next_values, gammas).float(), next_valid
    return losses.lambda_returns(next_reward.float(), next_done, next_values, next_valid, batch["returns"].float(),
                                 gammas.float(), cfg.critic_lambda), valid


def step_mask(batch: dict, actions: torch.Tensor | None = None):
    """Turns that reach a loss of ``actions`` (B, T) (the batch's ``action`` when None): valid, with an action and
    at least one legal action."""
    actions = batch["action"] if actions is None else actions
    return batch["valid"] & (actions >= 0) & batch["legal"].any(-1)


class PolicyRecipe(Recipe):
    """The Pokémon policy on ``training/fit.py``: windows of ``context`` turns, the policy's losses."""

    config_class = TrainConfig
    kind = "pokemon_policy"
    tag = "train"
    stream_fields = ("sides", "validation_share", "train_share")

    def __init__(self, cfg: TrainConfig, plan: dict):
        super().__init__(cfg, plan)
        self._gammas = None  # the critics' discount factors on the training device (see loss)
        self._val = None

    @classmethod
    def make_plan(cls, cfg: TrainConfig, version) -> dict:
        if cfg.label == "teacher" and not teacher_labelled_turns(version):
            raise ValueError(f"--label teacher: no row of {cfg.shard_paths()} has a teacher_action (every one is -1); "
                             "parse battles with a teacher (parse_replays.py --source generated --p1-teacher search) "
                             "or train with --label action")
        return {"vocab_size": len(vocabulary(version.manifest.observation_version))}

    def model_config(self):
        policy_cfg = PolicyConfig.preset(self.cfg.preset, self.plan["vocab_size"], d_model=self.cfg.d_model,
                                        action_head=self.cfg.action_head, critic_trunk=self.cfg.critic_trunk,
                                        critic_context=self.cfg.critic_context)
        return dataclasses.replace(policy_cfg, max_turns=max(policy_cfg.max_turns, self.cfg.context))

    def init_config(self, ckpt):
        model_config = ckpt.build_config()
        if self.cfg.context > model_config.max_turns:
            raise ValueError(f"--context {self.cfg.context} is longer than the {model_config.max_turns} turns the "
                             f"checkpoint's position embedding covers ({ckpt.where})")
        return model_config

    def epoch_windows(self, version, epoch: int):
        return window_specs(version, self.cfg.context, self.cfg.seed + epoch, self.cfg.sides,
                            validation_share=self.cfg.validation_share, split_seed=self.cfg.seed,
                            train_share=self.cfg.train_share)

    def loader(self, model_config):
        return LoadTurnWindows(self.cfg.shard_paths(), self.cfg.context, vocab_size=self.plan["vocab_size"],
                               gammas=returns_gammas(self.cfg, model_config),
                               shaping=reward_shaping(self.cfg.reward_hp, self.cfg.reward_faint))

    def samples(self, batch: dict) -> int:
        return int(step_mask(batch, label_actions(batch, self.cfg.label)).sum())

    def loss(self, model, batch: dict, step: int):
        device = batch["reward"].device
        if self._gammas is None or self._gammas.device != device:
            # made once per device: a new tensor each step is a host→device copy every step
            self._gammas = torch.tensor(getattr(model, "module", model).cfg.gammas, device=device)
        total, actor, critic, accuracy, _ = compute_losses(model, batch, self.cfg, self._gammas, step)
        return total, {"actor_loss": actor, "critic_loss": critic, "accuracy": accuracy}

    def evaluate(self, model, device, step: int) -> dict | None:
        if not self.cfg.validation_share or not (step % self.cfg.eval_every == 0 or step == self.cfg.steps):
            return None
        if self._val is None:
            self._val = validation_windows(self.cfg, self.plan["vocab_size"], getattr(model, "module", model).cfg)
        return evaluate(model, self._val, self.cfg, device) if self._val else None


def returns_gammas(cfg: TrainConfig, model_config) -> tuple[float, ...] | None:
    """The discount factors whose trajectory returns the loader computes: the critics' where the targets or the
    advantage need them (``mc``, ``lambda``; ``--advantage-target return``), else None (``td`` reads none)."""
    return tuple(model_config.gammas) if cfg.critic_target != "td" or cfg.advantage_target == "return" else None


def reward_shaping(reward_hp: float, reward_faint: float) -> tuple[float, float] | None:
    """(hp weight, faint weight) of the loader's dense rewards, or None when the reward is the result alone."""
    return (reward_hp, reward_faint) if (reward_hp or reward_faint) else None


def validation_windows(cfg: TrainConfig, vocab_size: int, model_config) -> dict:
    """The first ``max_eval_windows`` windows of the held-out battles of every version trained on, in a fixed
    order (resuming stays exact)."""
    specs = window_specs(open_shards(cfg.shard_paths(), check_sha256=False), cfg.context, 0, cfg.sides,
                         validation_share=cfg.validation_share, split_seed=cfg.seed, validation=True)
    return first_windows(specs, cfg.max_eval_windows,
                         LoadTurnWindows(cfg.shard_paths(), cfg.context, vocab_size=vocab_size,
                                       gammas=returns_gammas(cfg, model_config),
                                       shaping=reward_shaping(cfg.reward_hp, cfg.reward_faint)))


def evaluate(model, windows: dict, cfg: TrainConfig, device, batch_size: int = 64) -> dict[str, float]:
    """Validation losses and accuracy of the policy on held-out windows, weighted by the turns each batch scores
    (``val_loss_total`` is what a sweep compares)."""
    was_training = model.training
    model.eval()
    gammas = torch.tensor(getattr(model, "module", model).cfg.gammas, device=device)
    sums, turns = {"total": 0.0, "actor": 0.0, "critic": 0.0, "accuracy": 0.0}, 0.0
    with torch.no_grad():
        for start in range(0, len(windows["valid"]), batch_size):
            batch = {k: torch.as_tensor(v[start:start + batch_size]).to(device) for k, v in windows.items()
                     if k != "window"}
            total, actor, critic, accuracy, scored = compute_losses(model, batch, cfg, gammas)
            n = float(scored)
            for name, value in zip(sums, (total, actor, critic, accuracy), strict=True):
                sums[name] += float(value) * n
            turns += n
    model.train(was_training)
    return {f"val_{'loss_' + k if k != 'accuracy' else k}": v / max(turns, 1.0) for k, v in sums.items()}


def run(cfg: TrainConfig):
    """Train on Ray Train (``training/fit.fit``); Ray Train's ``Result``."""
    return fit(cfg, PolicyRecipe)


def main(argv: list[str] | None = None) -> None:
    fit_main(TrainConfig, PolicyRecipe, argv)


if __name__ == "__main__":
    main()
