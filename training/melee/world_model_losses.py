"""The world model's losses, its copy-last-frame baseline and its metrics: pure functions of tensors.

Inputs follow ``models/world_model.py``: a window of T+1 frames gives T inputs (frames 0..T-1) and their T targets
(frames 1..T). A position counts only where both frames exist; a field counts only where the replay records it in
both frames (continuous), in the target (flags), or where the target class is not null (categorical).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from models.world_model import FrameState, Prediction, change_ratio
from shards_schema.melee_features import BINARY_FIELDS, CAT_FIELDS, CAT_INDEX, CONT_FIELDS, CONT_INDEX
from training.losses import masked_mean

HUBER_BETA = 1.0
"""Continuous changes (in change units) use a Huber loss: respawns and teleports make rare huge changes that would
swamp a squared error (x jumps ~200 units at a respawn: 100 change units)."""

CATEGORIES = ("idle", "movement", "aerial", "ground_attack", "aerial_attack", "damage", "shield_dodge", "grab", "edge",
              "special", "other")
_CATEGORY_RANGES = (  # common action-state ids (peppi's Common table), inclusive
    ("idle", 0, 14), ("movement", 15, 24), ("aerial", 25, 38), ("idle", 39, 41), ("movement", 42, 43),
    ("ground_attack", 44, 64), ("aerial_attack", 65, 74), ("damage", 75, 91), ("other", 92, 177),
    ("shield_dodge", 178, 182), ("damage", 183, 211), ("grab", 212, 222), ("damage", 223, 232),
    ("shield_dodge", 233, 236), ("damage", 237, 243), ("movement", 244, 246), ("other", 247, 251),
    ("edge", 252, 263), ("idle", 264, 265), ("damage", 266, 321), ("idle", 322, 324), ("damage", 325, 340),
)


@functools.cache
def action_category_table(num_classes: int) -> torch.Tensor:
    """Category index of every action class (class = action-state id + 1; class 0, null, maps to ``other``); built
    once per size, every metric batch reads it."""
    table = np.full(num_classes, CATEGORIES.index("other"), np.int64)
    for name, lo, hi in _CATEGORY_RANGES:
        table[lo + 1:hi + 2] = CATEGORIES.index(name)
    table[341 + 1:] = CATEGORIES.index("special")  # character-specific states
    return torch.from_numpy(table)


@dataclass
class Targets:
    """Current (inputs) and next (targets) frames of T positions and the masks of what counts."""

    current: FrameState
    next: FrameState
    step: torch.Tensor  # (B, T) both frames exist
    cont_mask: torch.Tensor  # (B, T, Nc)
    binary_mask: torch.Tensor  # (B, T, Nb)
    cat_mask: torch.Tensor  # (B, T, Nk)


def split_window(batch: dict[str, torch.Tensor]) -> tuple[FrameState, torch.Tensor, torch.Tensor, Targets]:
    """A batch of T+1-frame windows → (input states, next controllers, stage, targets)."""
    valid = batch["valid"]
    current = FrameState(cont=batch["cont"][:, :-1], binary=batch["binary"][:, :-1], cat=batch["cat"][:, :-1],
                         cont_valid=batch["cont_valid"][:, :-1])
    nxt = FrameState(cont=batch["cont"][:, 1:], binary=batch["binary"][:, 1:], cat=batch["cat"][:, 1:],
                     cont_valid=batch["cont_valid"][:, 1:])
    step = valid[:, :-1] & valid[:, 1:]
    targets = Targets(current=current, next=nxt, step=step,
                      cont_mask=step[..., None] & current.cont_valid & nxt.cont_valid,
                      binary_mask=step[..., None] & batch["binary_valid"][:, 1:],
                      cat_mask=step[..., None] & (nxt.cat > 0))
    return current, batch["ctrl"][:, 1:], batch["stage"][:, :-1], targets


def change_units(t: Targets) -> torch.Tensor:
    """The true change of every continuous field from the input frame to the target, in change units."""
    return (t.next.cont - t.current.cont).float() / change_ratio(t.next.cont.device, torch.float32)


def losses(pred: Prediction, t: Targets) -> dict[str, torch.Tensor]:
    """Huber on continuous deltas, BCE on flags, cross-entropy per categorical field (mean over fields);
    ``total`` is their sum."""
    delta = change_units(t)
    cont = masked_mean(F.smooth_l1_loss(pred.cont_delta.float(), delta, beta=HUBER_BETA, reduction="none"),
                        t.cont_mask)
    binary = masked_mean(F.binary_cross_entropy_with_logits(pred.binary_logits.float(), t.next.binary.float(),
                                                             reduction="none"), t.binary_mask)
    per_field = []
    for i, logits in enumerate(pred.cat_logits):
        ce = F.cross_entropy(logits.float().flatten(0, 1), t.next.cat[..., i].flatten(), reduction="none")
        per_field.append(masked_mean(ce.view_as(t.next.cat[..., i]), t.cat_mask[..., i]))
    cat = torch.stack(per_field).mean()
    action = torch.stack([per_field[CAT_INDEX[f"{p}.action"]] for p in ("p0", "p1")]).mean()
    return {"total": cont + binary + cat, "cont": cont, "binary": binary, "cat": cat, "action": action}


def copy_last_prediction(t: Targets) -> Prediction:
    """The copy-last-frame baseline as a distribution: no change, with each field's confidence set to how often
    copying is right in these very targets (calibrated on them, so the comparison favours the baseline)."""
    eps = 1e-6
    binary_logits = torch.zeros_like(t.current.binary, dtype=torch.float32)
    for i in range(len(BINARY_FIELDS)):
        mask = t.binary_mask[..., i]
        acc = ((t.current.binary[..., i] == t.next.binary[..., i]) & mask).sum() / mask.sum().clamp(min=1)
        acc = float(acc.clamp(eps, 1 - eps))
        logit = math.log(acc / (1 - acc))
        binary_logits[..., i] = torch.where(t.current.binary[..., i] > 0.5, logit, -logit)
    cat_logits = []
    for i, (_, classes) in enumerate(CAT_FIELDS):
        mask = t.cat_mask[..., i]
        acc = ((t.current.cat[..., i] == t.next.cat[..., i]) & mask).sum() / mask.sum().clamp(min=1)
        acc = float(acc.clamp(eps, 1 - eps))
        logits = torch.full((*t.current.cat.shape[:-1], classes), math.log((1 - acc) / (classes - 1)))
        logits.scatter_(-1, t.current.cat[..., i:i + 1], math.log(acc))
        cat_logits.append(logits)
    return Prediction(cont_delta=torch.zeros_like(t.current.cont, dtype=torch.float32), binary_logits=binary_logits,
                      cat_logits=cat_logits)


@dataclass
class MetricSums:
    """Counts summed over batches; ``as_dict`` turns them into accuracies and errors."""

    action_right: float = 0.0
    action_total: float = 0.0
    change_right: float = 0.0
    change_total: float = 0.0
    position_abs_error: float = 0.0
    position_total: float = 0.0
    category_right: np.ndarray | None = None
    category_total: np.ndarray | None = None

    def add(self, pred: Prediction, t: Targets) -> None:
        table = action_category_table(pred.cat_logits[CAT_INDEX["p0.action"]].shape[-1]).to(t.next.cat.device)
        change = change_units(t)
        right_c = torch.zeros(len(CATEGORIES), dtype=torch.float64)
        total_c = torch.zeros(len(CATEGORIES), dtype=torch.float64)
        for p in ("p0", "p1"):
            i = CAT_INDEX[f"{p}.action"]
            mask = t.cat_mask[..., i]
            guess, truth, before = pred.cat_logits[i].argmax(-1), t.next.cat[..., i], t.current.cat[..., i]
            right = (guess == truth) & mask
            changed = mask & (truth != before)
            self.action_right += float(right.sum())
            self.action_total += float(mask.sum())
            self.change_right += float((right & changed).sum())
            self.change_total += float(changed.sum())
            category = table[truth]
            right_c += torch.bincount(category[right], minlength=len(CATEGORIES)).double().cpu()
            total_c += torch.bincount(category[mask], minlength=len(CATEGORIES)).double().cpu()
            for axis in ("x", "y"):
                j = CONT_INDEX[f"{p}.{axis}"]
                error = (pred.cont_delta[..., j] - change[..., j]).abs() * CONT_FIELDS[j][2]  # game units
                self.position_abs_error += float((error * t.cont_mask[..., j]).sum())
                self.position_total += float(t.cont_mask[..., j].sum())
        self.category_right = right_c.numpy() + (0 if self.category_right is None else self.category_right)
        self.category_total = total_c.numpy() + (0 if self.category_total is None else self.category_total)

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        out = {f"{prefix}action_acc": self.action_right / max(self.action_total, 1),
               f"{prefix}action_change_acc": self.change_right / max(self.change_total, 1),
               f"{prefix}position_mae": self.position_abs_error / max(self.position_total, 1)}
        if self.category_total is not None:
            for name, right, total in zip(CATEGORIES, self.category_right, self.category_total, strict=True):
                if total:
                    out[f"{prefix}acc_{name}"] = float(right / total)
        return out
