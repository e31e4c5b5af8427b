"""Melee world model: per-frame state of both players, their controllers and projectiles → the next frame's state.

The feature spec (layout and version in ``shards_schema/melee_features.py``, ``featurize`` and ``unfeaturize`` in
``pipelines/melee/features.py``) is the contract between the frame shards, the model and the rollout: every field the
model reads it also predicts (continuous fields as deltas of their scaled value, flags as logits, categorical fields
as classes), so nothing goes stale when predictions are fed back. Inputs at frame t are the state of frame t and the
controllers of frame t+1 (the inputs that produce frame t+1); the target is the state of frame t+1. The stage is a
per-game constant and is read, not predicted; Nana (Ice Climbers' follower) is neither read nor predicted yet.

Categorical values are stored as ``id + 1``; class 0 means null (a field the replay's version does not record) and
is never a target. Ids beyond a field's table clamp to its last class.

Backbones: ``mamba2`` (a stack of pre-norm residual Mamba-2 blocks, ``models/mamba2.py``) and ``mlp`` (an MLP over
the last ``mlp_context`` frames), the baseline. Both have ``step()`` for frame-by-frame rollout. Plain modules, no I/O.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import nn

from models.mamba2 import Mamba2, Mamba2Config
from shards_schema.melee_features import BINARY_FIELDS, CAT_FIELDS, CONT_FIELDS, CTRL_FEATURES, STAGES

CHANGE_RATIO = torch.tensor([step / scale for _, scale, step in CONT_FIELDS])
"""Predicted change (change units) × this = change of the model's input value."""


@functools.lru_cache(maxsize=16)
def change_ratio(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``CHANGE_RATIO`` on a device, copied there once: a copy from pageable host memory each rollout step would
    wait for the GPU stream every time."""
    return CHANGE_RATIO.to(device, dtype)


@dataclass(frozen=True, kw_only=True)
class WorldModelConfig:
    """Shapes of the world model.

    Attributes:
        backbone: ``mamba2`` or ``mlp`` (the baseline: an MLP over the last ``mlp_context`` frames).
        d_model: width of the frame vectors.
        n_layers: backbone blocks.
        d_embed: embedding width of each categorical field (action states get four times as much).
        d_state: Mamba-2 state size.
        headdim: Mamba-2 head width.
        expand: Mamba-2 inner expansion.
        chunk_size: Mamba-2 scan chunk length.
        mlp_context: frames the MLP baseline sees.
        dropout: dropout on the frame vectors (training only).
        use_fused: use mamba_ssm's fused scan when on CUDA and installed (else the PyTorch scan, with one warning).
        require_fused: with ``use_fused``, fail at construction when the fused scan cannot load instead of falling
            back (``Mamba2Config.require_fused``).
    """

    backbone: str = "mamba2"
    d_model: int = 256
    n_layers: int = 4
    d_embed: int = 16
    d_state: int = 64
    headdim: int = 32
    expand: int = 2
    chunk_size: int = 64
    mlp_context: int = 8
    dropout: float = 0.1
    use_fused: bool = False
    require_fused: bool = False

    def __post_init__(self):
        if self.backbone not in ("mamba2", "mlp"):
            raise ValueError(f"backbone must be mamba2 or mlp, got {self.backbone!r}")
        if self.mlp_context < 1:
            raise ValueError("mlp_context must be at least 1")

    @classmethod
    def preset(cls, name: str, **overrides) -> WorldModelConfig:
        """``tiny`` (tests, ~0.3M parameters) or ``base`` (~15M)."""
        sizes = {
            "tiny": dict(d_model=64, n_layers=2, d_embed=8, d_state=16, headdim=16, chunk_size=32),
            "base": dict(d_model=512, n_layers=7, d_embed=32, d_state=64, headdim=64, chunk_size=64),
        }
        if name not in sizes:
            raise ValueError(f"unknown preset {name!r}; choose from {sorted(sizes)}")
        return cls(**{**sizes[name], **overrides})


@dataclass
class FrameState:
    """A batch of frame states in model units: cont (B, T, Nc) scaled values, binary (B, T, Nb) in {0, 1}, cat
    (B, T, Nk) class ids (0 = null), cont_valid (B, T, Nc) whether each continuous value is recorded."""

    cont: torch.Tensor
    binary: torch.Tensor
    cat: torch.Tensor
    cont_valid: torch.Tensor


@dataclass
class Prediction:
    """Next-frame predictions: cont_delta (B, T, Nc) in change units (see ``CONT_FIELDS``), binary_logits (B, T, Nb),
    cat_logits: one (B, T, classes) tensor per categorical field, in ``CAT_FIELDS`` order."""

    cont_delta: torch.Tensor
    binary_logits: torch.Tensor
    cat_logits: list[torch.Tensor]

    def next_state(self, current: FrameState) -> FrameState:
        """The most likely next frame: current + delta, flags by sign, argmax classes."""
        ratio = change_ratio(current.cont.device, current.cont.dtype)
        return FrameState(cont=current.cont + self.cont_delta.to(current.cont.dtype) * ratio,
                          binary=(self.binary_logits > 0).to(current.binary.dtype),
                          cat=torch.stack([logits.argmax(-1) for logits in self.cat_logits], dim=-1),
                          cont_valid=current.cont_valid)


class FrameEncoder(nn.Module):
    """One frame (state, next controllers, stage) → a d_model vector."""

    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        self.embeddings = nn.ModuleList(
            nn.Embedding(classes, cfg.d_embed * (4 if name.endswith(".action") else 1)) for name, classes in CAT_FIELDS)
        self.stage = nn.Embedding(STAGES, cfg.d_embed)
        width = (2 * len(CONT_FIELDS) + len(BINARY_FIELDS) + CTRL_FEATURES + cfg.d_embed
                 + sum(e.embedding_dim for e in self.embeddings))
        self.proj = nn.Sequential(nn.Linear(width, cfg.d_model), nn.GELU(), nn.Linear(cfg.d_model, cfg.d_model),
                                  nn.Dropout(cfg.dropout))

    def forward(self, state: FrameState, ctrl_next: torch.Tensor, stage: torch.Tensor) -> torch.Tensor:
        """state (B, T, ...), ctrl_next (B, T, CTRL_FEATURES), stage (B, T) → (B, T, d_model)."""
        embedded = [emb(state.cat[..., i]) for i, emb in enumerate(self.embeddings)]  # each (B, T, d_i)
        features = torch.cat([state.cont * state.cont_valid, state.cont_valid.to(state.cont.dtype), state.binary,
                              ctrl_next, self.stage(stage), *embedded], dim=-1)  # (B, T, width)
        return self.proj(features)


class MambaBackbone(nn.Module):
    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        block = Mamba2Config(d_model=cfg.d_model, d_state=cfg.d_state, headdim=cfg.headdim, expand=cfg.expand,
                             chunk_size=cfg.chunk_size, use_fused=cfg.use_fused,
                             require_fused=cfg.require_fused)
        self.norms = nn.ModuleList(nn.RMSNorm(cfg.d_model) for _ in range(cfg.n_layers))
        self.mixers = nn.ModuleList(Mamba2(block) for _ in range(cfg.n_layers))
        self.final_norm = nn.RMSNorm(cfg.d_model)

    def forward(self, x: torch.Tensor, cache: list | None = None) -> tuple[torch.Tensor, list]:
        """(B, T, d) → (B, T, d) and the per-layer (conv_state, ssm_state) after the sequence."""
        new_cache = []
        for i, (norm, mixer) in enumerate(zip(self.norms, self.mixers, strict=True)):
            conv, ssm = cache[i] if cache is not None else (None, None)
            y, conv, ssm = mixer.forward_with_state(norm(x), conv, ssm)
            x = x + y
            new_cache.append((conv, ssm))
        return self.final_norm(x), new_cache

    def step(self, x: torch.Tensor, cache: list) -> tuple[torch.Tensor, list]:
        """(B, 1, d) → (B, 1, d); the cache is updated in place."""
        for (norm, mixer), (conv, ssm) in zip(zip(self.norms, self.mixers, strict=True), cache, strict=True):
            y, _, _ = mixer.step(norm(x), conv, ssm)
            x = x + y
        return self.final_norm(x), cache


class MLPBackbone(nn.Module):
    """The baseline: each frame's output sees only the last ``mlp_context`` frame vectors (zeros before the start)."""

    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        self.context = cfg.mlp_context
        layers: list[nn.Module] = [nn.Linear(cfg.mlp_context * cfg.d_model, cfg.d_model), nn.GELU()]
        for _ in range(cfg.n_layers - 1):
            layers += [nn.Linear(cfg.d_model, cfg.d_model), nn.GELU()]
        self.mlp = nn.Sequential(*layers, nn.LayerNorm(cfg.d_model))

    def forward(self, x: torch.Tensor, cache: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T, d) → (B, T, d); the cache is the last ``mlp_context - 1`` frame vectors (B, W-1, d)."""
        batch, _, d = x.shape
        if cache is None:
            cache = x.new_zeros(batch, self.context - 1, d)
        padded = torch.cat([cache, x], dim=1)  # (B, W-1+T, d)
        windows = padded.unfold(1, self.context, 1)  # (B, T, d, W)
        windows = windows.transpose(-1, -2).reshape(batch, x.shape[1], self.context * d)  # (B, T, W*d)
        return self.mlp(windows), padded[:, padded.shape[1] - (self.context - 1):]

    def step(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward(x, cache)


class WorldModel(nn.Module):
    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = FrameEncoder(cfg)
        self.backbone = MambaBackbone(cfg) if cfg.backbone == "mamba2" else MLPBackbone(cfg)
        self.cont_head = nn.Linear(cfg.d_model, len(CONT_FIELDS))
        self.binary_head = nn.Linear(cfg.d_model, len(BINARY_FIELDS))
        self.cat_sizes = [classes for _, classes in CAT_FIELDS]
        self.cat_head = nn.Linear(cfg.d_model, sum(self.cat_sizes))
        # Most fields keep their value from one frame to the next (an action state lasts ~15 frames; copying the last
        # frame's action is right 91% of the time on the shared replays): a learned bonus on the current class / flag
        # starts the model at "no change, probability 0.9", and the heads learn the changes.
        self.copy_cat = nn.Parameter(torch.tensor([math.log(9.0 * (classes - 1)) for _, classes in CAT_FIELDS]))
        self.copy_binary = nn.Parameter(torch.full((len(BINARY_FIELDS),), math.log(9.0)))
        offsets = torch.tensor([0, *self.cat_sizes[:-1]]).cumsum(0)
        self.register_buffer("cat_offsets", offsets, persistent=False)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _heads(self, h: torch.Tensor, state: FrameState) -> Prediction:
        """(B, T, d_model) and the input frames → predictions of the next frames."""
        cat = self.cat_head(h)  # (B, T, sum of classes)
        bonus = self.copy_cat.to(cat.dtype).expand(*state.cat.shape)  # (B, T, Nk)
        cat = cat.scatter_add(-1, state.cat + self.cat_offsets, bonus)
        binary = self.binary_head(h) + self.copy_binary.to(h.dtype) * (2 * state.binary.to(h.dtype) - 1)
        return Prediction(cont_delta=self.cont_head(h), binary_logits=binary,
                          cat_logits=list(cat.split(self.cat_sizes, dim=-1)))

    def forward(self, state: FrameState, ctrl_next: torch.Tensor, stage: torch.Tensor,
                cache=None) -> tuple[Prediction, object]:
        """Whole sequences: state (B, T, ...), ctrl_next (B, T, CTRL_FEATURES), stage (B, T) → predictions of frames
        1..T and the backbone cache after frame T (to continue with ``step``)."""
        h, cache = self.backbone(self.encoder(state, ctrl_next, stage), cache)
        return self._heads(h, state), cache

    def step(self, state: FrameState, ctrl_next: torch.Tensor, stage: torch.Tensor, cache) -> tuple[Prediction, object]:
        """One frame (T = 1) after a primed cache; equals ``forward`` over the whole sequence."""
        h, cache = self.backbone.step(self.encoder(state, ctrl_next, stage), cache)
        return self._heads(h, state), cache

    def empty_cache(self, batch_size: int, device=None):
        """The cache before the first frame (feed ``forward`` or ``step`` from it)."""
        device = device or self.cont_head.weight.device
        if isinstance(self.backbone, MambaBackbone):
            return [m.allocate_inference_cache(batch_size, device=device) for m in self.backbone.mixers]
        return torch.zeros(batch_size, self.cfg.mlp_context - 1, self.cfg.d_model, device=device)

