"""Mamba-2 block (state-space duality, SSD) in plain PyTorch, state-dict compatible with mamba_ssm's ``Mamba2``.

Parameter names, shapes and init follow ``mamba_ssm.modules.mamba2.Mamba2`` (state-spaces/mamba) with its defaults
``d_ssm=None``, ``D_has_hdim=False``, ``rmsnorm=True``, ``norm_before_gate=False``, ``conv_init=None``,
``dt_limit=(0, inf)`` and no process group, so a state_dict saved from one loads into the other with ``strict=True``:

    dt_bias (H,)  A_log (H,)  D (H,)  in_proj.weight (d_in_proj, d_model)  conv1d.weight (conv_dim, 1, d_conv)
    conv1d.bias (conv_dim,)  norm.weight (d_inner,)  out_proj.weight (d_model, d_inner)  [+ in/out_proj.bias]

with d_inner = expand * d_model, H = d_inner / headdim, conv_dim = d_inner + 2 * ngroups * d_state and
d_in_proj = 2 * d_inner + 2 * ngroups * d_state + H; in_proj's output is ordered [z, x, B, C, dt].

Letters in shape comments: B batch, L sequence, H heads, P headdim, G groups, N d_state, C chunks, Q chunk length.

The scan has a readable reference (``ssd_naive``, one step at a time) and the fast chunked form (``ssd_chunked``,
after ``ssd_minimal.py``, Listing 1 of the Mamba-2 paper); tests compare them. On CUDA with mamba_ssm installed,
``Mamba2Config.use_fused`` swaps ``ssd_chunked`` for mamba_ssm's Triton ``mamba_chunk_scan_combined``.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True, kw_only=True)
class Mamba2Config:
    """Shapes and init of one Mamba-2 block; field names follow mamba_ssm's ``Mamba2`` arguments.

    Attributes:
        d_model: width of the block's input and output.
        d_state: SSM state size per head (N).
        d_conv: width of the causal depthwise convolution over [x, B, C].
        expand: d_inner = expand * d_model.
        headdim: channels per SSM head (P); d_inner must be a multiple of it.
        ngroups: groups sharing one B and C (G); the heads must split evenly among them.
        chunk_size: chunk length (Q) of the chunked scan; changes speed and memory, not the result.
        dt_min: smallest initial step size dt (log-uniform init of dt_bias).
        dt_max: largest initial step size dt.
        dt_init_floor: initial dt values are clamped to at least this.
        A_init_range: A = -uniform(A_init_range) per head at init, stored as A_log = log(-A).
        bias: whether in_proj and out_proj have biases.
        conv_bias: whether conv1d has a bias.
        norm_eps: epsilon of the gated RMSNorm before out_proj.
        use_fused: scan with mamba_ssm's Triton kernel when ``fused_available()`` and the input is on CUDA; the
            PyTorch scan otherwise, so the same config runs on CPU. When the kernel cannot load here (no CUDA, or
            mamba_ssm does not import), building the block warns once per process with the reason.
        require_fused: raise at construction, with the reason and the install command, instead of falling back
            to the PyTorch scan when the fused kernel cannot load; needs ``use_fused``. For GPU runs that must not
            silently train on the slow path.
    """

    d_model: int
    d_state: int = 64
    d_conv: int = 4
    expand: int = 2
    headdim: int = 64
    ngroups: int = 1
    chunk_size: int = 64
    dt_min: float = 0.001
    dt_max: float = 0.1
    dt_init_floor: float = 1e-4
    A_init_range: tuple[float, float] = (1.0, 16.0)
    bias: bool = False
    conv_bias: bool = True
    norm_eps: float = 1e-5
    use_fused: bool = False
    require_fused: bool = False

    def __post_init__(self):
        if self.require_fused and not self.use_fused:
            raise ValueError("require_fused needs use_fused=True (it forbids falling back from the fused scan)")
        for name in ("d_model", "d_state", "d_conv", "expand", "headdim", "ngroups", "chunk_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.d_inner % self.headdim:
            raise ValueError(f"d_inner = expand * d_model = {self.d_inner} is not divisible by headdim "
                             f"{self.headdim}; pick headdim dividing {self.d_inner}")
        if self.nheads % self.ngroups:
            raise ValueError(f"nheads = d_inner / headdim = {self.nheads} is not divisible by ngroups "
                             f"{self.ngroups}; each group must hold the same number of heads")
        if not 0 < self.dt_min <= self.dt_max:
            raise ValueError(f"need 0 < dt_min <= dt_max, got dt_min={self.dt_min}, dt_max={self.dt_max}")
        if self.dt_init_floor < 0:
            raise ValueError(f"dt_init_floor must be >= 0, got {self.dt_init_floor}")
        low, high = self.A_init_range
        if not 0 < low <= high:
            raise ValueError(f"need 0 < A_init_range[0] <= A_init_range[1], got {self.A_init_range}")
        if self.norm_eps <= 0:
            raise ValueError(f"norm_eps must be > 0, got {self.norm_eps}")

    @property
    def d_inner(self) -> int:
        """Width of the SSM branch (and of the gate z)."""
        return self.expand * self.d_model

    @property
    def nheads(self) -> int:
        """SSM heads (H)."""
        return self.d_inner // self.headdim

    @property
    def conv_dim(self) -> int:
        """Channels through the convolution: [x, B, C]."""
        return self.d_inner + 2 * self.ngroups * self.d_state

    @property
    def d_in_proj(self) -> int:
        """Output width of in_proj: [z, x, B, C, dt]."""
        return 2 * self.d_inner + 2 * self.ngroups * self.d_state + self.nheads

    @classmethod
    def tiny(cls, **overrides) -> Mamba2Config:
        """A few thousand parameters, two groups and short chunks, for tests and demos."""
        return cls(**{"d_model": 16, "d_state": 8, "headdim": 8, "ngroups": 2, "chunk_size": 4, **overrides})


# --- the scan ------------------------------------------------------------------------------------------------------
# All scan functions take dt after softplus and bias, A = -exp(A_log) < 0, and compute
#   h_t = exp(dt_t * A) * h_{t-1} + dt_t * x_t B_t^T,   y_t = h_t C_t
# per head, with head h reading group h // (H / G) of B and C (mamba_ssm's convention). The D skip and the gate
# are not part of the scan.


def _heads_from_groups(t: torch.Tensor, nheads: int) -> torch.Tensor:
    """(..., G, N) → (..., H, N): head h uses group h // (H / G)."""
    return t.repeat_interleave(nheads // t.shape[-2], dim=-2)


def ssd_naive(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
              initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference scan, one time step at a time (slow, readable).

    Args:
        x: (B, L, H, P) inputs.
        dt: (B, L, H) positive step sizes.
        A: (H,) negative decay rates.
        B: (B, L, G, N) input projections.
        C: (B, L, G, N) output projections.
        initial_state: (B, H, P, N) state before the first step; zeros when None.

    Returns:
        y (B, L, H, P) and the state after the last step (B, H, P, N).
    """
    batch, seqlen, nheads, headdim = x.shape
    B, C = _heads_from_groups(B, nheads), _heads_from_groups(C, nheads)  # (B, L, H, N)
    h = x.new_zeros(batch, nheads, headdim, B.shape[-1]) if initial_state is None else initial_state
    ys = []
    for t in range(seqlen):
        decay = torch.exp(dt[:, t] * A)  # (B, H)
        h = h * decay[:, :, None, None] + torch.einsum("bh,bhp,bhn->bhpn", dt[:, t], x[:, t], B[:, t])
        ys.append(torch.einsum("bhpn,bhn->bhp", h, C[:, t]))
    return torch.stack(ys, dim=1), h  # (B, L, H, P), (B, H, P, N)


def _segsum(a: torch.Tensor) -> torch.Tensor:
    """(..., T) → (..., T, T) with out[i, j] = a[j+1] + ... + a[i] for i >= j and -inf above the diagonal.

    Sums the masked terms directly instead of differencing one cumsum, which loses precision in float32 when the
    cumsum is large (the "stable segsum" of ssd_minimal.py).
    """
    length = a.shape[-1]
    terms = a[..., :, None].expand(*a.shape, length)  # (..., T, T): terms[k, j] = a[k]
    strictly_lower = torch.ones(length, length, dtype=torch.bool, device=a.device).tril(-1)
    sums = terms.masked_fill(~strictly_lower, 0).cumsum(dim=-2)  # sums[i, j] = sum of a[k] for j < k <= i
    lower = torch.ones(length, length, dtype=torch.bool, device=a.device).tril(0)
    return sums.masked_fill(~lower, -math.inf)


def ssd_chunked(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                chunk_size: int, initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The same scan as ``ssd_naive``, in chunks: quadratic attention-like form inside each chunk, a recurrence
    over chunk-end states between chunks. Any L; the last chunk is zero-padded (dt = 0 there, so padded steps
    neither decay nor add to the state).

    Args and returns as ``ssd_naive``, plus ``chunk_size`` (Q).
    """
    batch, seqlen, nheads, headdim = x.shape
    d_state = B.shape[-1]
    pad = -seqlen % chunk_size
    if pad:
        x, B, C = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (x, B, C))  # (B, L + pad, ., .)
        dt = F.pad(dt, (0, 0, 0, pad))  # (B, L + pad, H)
    nchunks = (seqlen + pad) // chunk_size
    B, C = _heads_from_groups(B, nheads), _heads_from_groups(C, nheads)  # (B, L + pad, H, N)

    x = (x * dt[..., None]).reshape(batch, nchunks, chunk_size, nheads, headdim)  # (B, C, Q, H, P), x_t * dt_t
    B = B.reshape(batch, nchunks, chunk_size, nheads, d_state)  # (B, C, Q, H, N)
    C = C.reshape(batch, nchunks, chunk_size, nheads, d_state)  # (B, C, Q, H, N)
    dA = (dt * A).reshape(batch, nchunks, chunk_size, nheads).permute(0, 3, 1, 2)  # (B, H, C, Q)
    dA_cumsum = dA.cumsum(dim=-1)  # (B, H, C, Q)

    # 1. inside each chunk: y_i = sum_{j <= i} (C_i . B_j) exp(dA_{j+1} + ... + dA_i) x_j dt_j
    decay_within = torch.exp(_segsum(dA))  # (B, H, C, Q, Q)
    scores = torch.einsum("bclhn,bcshn->bhcls", C, B) * decay_within  # (B, H, C, Q, Q)
    y_diag = torch.einsum("bhcls,bcshp->bclhp", scores, x)  # (B, C, Q, H, P)

    # 2. each chunk's own contribution to the state at its end
    decay_to_end = torch.exp(dA_cumsum[..., -1:] - dA_cumsum)  # (B, H, C, Q)
    chunk_states = torch.einsum("bclhn,bhcl,bclhp->bchpn", B, decay_to_end, x)  # (B, C, H, P, N)

    # 3. recurrence over chunks: the state entering each chunk, and the final state
    if initial_state is None:
        initial_state = x.new_zeros(batch, nheads, headdim, d_state)
    chunk_states = torch.cat([initial_state[:, None], chunk_states], dim=1)  # (B, C + 1, H, P, N)
    decay_between = torch.exp(_segsum(F.pad(dA_cumsum[..., -1], (1, 0))))  # (B, H, C + 1, C + 1)
    states = torch.einsum("bhzc,bchpn->bzhpn", decay_between, chunk_states)  # (B, C + 1, H, P, N)
    states, final_state = states[:, :-1], states[:, -1]  # (B, C, H, P, N), (B, H, P, N)

    # 4. what the entering state contributes to each output in the chunk
    decay_from_start = torch.exp(dA_cumsum)  # (B, H, C, Q)
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", C, states, decay_from_start)  # (B, C, Q, H, P)

    y = (y_diag + y_off).reshape(batch, nchunks * chunk_size, nheads, headdim)  # (B, L + pad, H, P)
    return y[:, :seqlen], final_state


FUSED_INSTALL = ("`make setup-gpu`, or pip install --no-build-isolation 'mamba-ssm>=2.3.2' in an environment that "
                 "already has a CUDA build of torch >= 2.9, packaging, ninja, wheel and setuptools (pyproject.toml's "
                 "gpu extra says why)")
"""How to install the fused kernels: quoted in the ``require_fused`` error."""

_warned_fallback = False  # the fallback warning goes out once per process, however many blocks are built


@functools.cache
def _load_fused_scan() -> tuple[Callable | None, str | None]:
    """(mamba_ssm's Triton chunk scan, None), or (None, why it cannot run here).

    The import is tried even without CUDA so that the reason names an import failure too: mamba-ssm 2.2.4 and 2.3.x
    import the compiled ``selective_scan_cuda`` in ``mamba_ssm/__init__.py`` (so a Triton-only install fails here),
    and 2.2.4 imports ``GreedySearchDecoderOnlyOutput``, which transformers 5 removed. A broken compiled extension
    (undefined symbol, missing libcudart) also surfaces as ImportError.
    """
    reasons = []
    if not torch.cuda.is_available():
        reasons.append(f"torch.cuda.is_available() is False (torch {torch.__version__})")
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except ImportError as error:
        reasons.append(f"importing mamba_ssm failed: {type(error).__name__}: {error}")
        mamba_chunk_scan_combined = None
    if reasons:
        return None, "; ".join(reasons)
    return mamba_chunk_scan_combined, None


def _fused_scan() -> Callable | None:
    """mamba_ssm's Triton chunk scan, or None when there is no CUDA or mamba_ssm does not import."""
    return _load_fused_scan()[0]


def fused_unavailable_reason() -> str | None:
    """Why ``use_fused`` cannot take effect here (no CUDA, the import error), or None when it can."""
    return _load_fused_scan()[1]


def fused_available() -> bool:
    """Whether ``use_fused`` can take effect here: CUDA is available and mamba_ssm's Triton scan imports."""
    return _fused_scan() is not None


def check_fused(cfg: Mamba2Config) -> None:
    """What a block does at construction about its fused request: nothing when the kernel loads or was not asked
    for; raise under ``require_fused``; otherwise warn once per process that it falls back to the PyTorch scan."""
    global _warned_fallback
    if not cfg.use_fused:
        return
    reason = fused_unavailable_reason()
    if reason is None:
        return
    if cfg.require_fused:
        raise RuntimeError(f"require_fused: mamba_ssm's fused scan cannot run here ({reason}). "
                           f"Install it on a CUDA machine with: {FUSED_INSTALL}; or drop require_fused to train on "
                           "the PyTorch scan")
    if not _warned_fallback:
        _warned_fallback = True
        warnings.warn(f"use_fused was requested but mamba_ssm's fused scan cannot run here ({reason}); Mamba-2 "
                      f"blocks use the PyTorch scan (ssd_chunked), which is much slower on GPU. Install the kernel "
                      f"with: {FUSED_INSTALL}; pass require_fused to make this an error", RuntimeWarning,
                      stacklevel=3)


def _autocast_dtype(device_type: str) -> torch.dtype | None:
    """The autocast dtype in force for ``device_type``, or None when autocast is off there."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


# --- the block -----------------------------------------------------------------------------------------------------


class GatedRMSNorm(nn.Module):
    """RMSNorm of x * silu(z) over groups of ``group_size`` channels, times ``weight`` (mamba_ssm's
    ``layernorm_gated.RMSNorm`` with ``norm_before_gate=False``; like its reference, computed in at least float32)."""

    def __init__(self, hidden_size: int, group_size: int, eps: float):
        super().__init__()
        if hidden_size % group_size:
            raise ValueError(f"hidden_size {hidden_size} is not divisible by group_size {group_size}")
        self.group_size = group_size
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(x.dtype, torch.float32)
        gated = x.to(dtype) * F.silu(z.to(dtype))  # (..., D)
        grouped = gated.reshape(*gated.shape[:-1], -1, self.group_size)  # (..., D / group_size, group_size)
        normed = grouped * torch.rsqrt(grouped.square().mean(dim=-1, keepdim=True) + self.eps)
        normed = normed.reshape(gated.shape)  # (..., D)
        return (normed * self.weight.to(dtype)).to(x.dtype)


class Mamba2(nn.Module):
    """One Mamba-2 block: (B, L, d_model) → (B, L, d_model), causal.

    ``forward`` runs a whole sequence; ``forward_with_state`` also takes and returns the (conv_state, ssm_state)
    cache, so a rollout can prime it on a seed sequence and go on one token at a time with ``step``.
    """

    def __init__(self, cfg: Mamba2Config):
        super().__init__()
        check_fused(cfg)  # at construction, not per forward: warn or fail before any training step
        self.cfg = cfg
        # Registration order follows mamba_ssm, so state_dict keys come out in the same order.
        self.in_proj = nn.Linear(cfg.d_model, cfg.d_in_proj, bias=cfg.bias)
        self.conv1d = nn.Conv1d(cfg.conv_dim, cfg.conv_dim, kernel_size=cfg.d_conv, groups=cfg.conv_dim,
                                padding=cfg.d_conv - 1, bias=cfg.conv_bias)

        # dt log-uniform in [dt_min, dt_max], stored as its softplus inverse so softplus(dt_bias) = dt at init.
        log_dt = torch.rand(cfg.nheads) * (math.log(cfg.dt_max) - math.log(cfg.dt_min)) + math.log(cfg.dt_min)
        dt = torch.exp(log_dt).clamp(min=cfg.dt_init_floor)  # (H,)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.empty(cfg.nheads).uniform_(*cfg.A_init_range)))
        self.D = nn.Parameter(torch.ones(cfg.nheads))
        for p in (self.dt_bias, self.A_log, self.D):
            p._no_weight_decay = True  # as mamba_ssm marks them, for optimizers that read the flag

        self.norm = GatedRMSNorm(cfg.d_inner, group_size=cfg.d_inner // cfg.ngroups, eps=cfg.norm_eps)
        self.out_proj = nn.Linear(cfg.d_inner, cfg.d_model, bias=cfg.bias)

    def allocate_inference_cache(self, batch_size: int, dtype: torch.dtype | None = None,
                                 device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Zeroed (conv_state (B, conv_dim, d_conv), ssm_state (B, H, P, N)), the shapes mamba_ssm uses.

        Without ``dtype``, conv_state takes conv1d's dtype and ssm_state in_proj's, as in mamba_ssm.
        """
        cfg = self.cfg
        device = self.out_proj.weight.device if device is None else device
        conv_state = torch.zeros(batch_size, cfg.conv_dim, cfg.d_conv, device=device,
                                 dtype=dtype or self.conv1d.weight.dtype)
        ssm_state = torch.zeros(batch_size, cfg.nheads, cfg.headdim, cfg.d_state, device=device,
                                dtype=dtype or self.in_proj.weight.dtype)
        return conv_state, ssm_state

    def _split(self, zxbcdt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(..., d_in_proj) → z (..., d_inner), xBC (..., conv_dim), dt (..., H)."""
        cfg = self.cfg
        z, xBC, dt = zxbcdt.split([cfg.d_inner, cfg.conv_dim, cfg.nheads], dim=-1)
        return z, xBC, dt

    def _ssm_inputs(self, xBC: torch.Tensor, dt: torch.Tensor, dtype: torch.dtype):
        """Post-conv [x, B, C] (..., conv_dim) and raw dt (..., H) → x (..., H, P), B and C (..., G, N), dt after
        softplus and bias (..., H), A (H,), all in ``dtype``."""
        cfg = self.cfg
        x, B, C = xBC.to(dtype).split([cfg.d_inner, cfg.ngroups * cfg.d_state, cfg.ngroups * cfg.d_state], dim=-1)
        x = x.reshape(*x.shape[:-1], cfg.nheads, cfg.headdim)  # (..., H, P)
        B = B.reshape(*B.shape[:-1], cfg.ngroups, cfg.d_state)  # (..., G, N)
        C = C.reshape(*C.shape[:-1], cfg.ngroups, cfg.d_state)  # (..., G, N)
        dt = F.softplus(dt.to(dtype) + self.dt_bias.to(dtype))  # (..., H)
        A = -torch.exp(self.A_log.to(dtype))  # (H,)
        return x, B, C, dt, A

    def _output(self, y: torch.Tensor, x: torch.Tensor, z: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        """Scan output y and x (..., H, P), gate z (..., d_inner) → D skip, gated norm, out_proj (..., d_model)."""
        y = y + x * self.D.to(y.dtype)[:, None]  # (..., H, P)
        y = y.reshape(*y.shape[:-2], self.cfg.d_inner)  # (..., d_inner)
        return self.out_proj(self.norm(y.to(out_dtype), z))

    def _fused_for(self, u: torch.Tensor) -> Callable | None:
        """The fused scan for input ``u``, or None for the PyTorch scan (not requested, unavailable, or not CUDA)."""
        return _fused_scan() if self.cfg.use_fused and u.is_cuda else None

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """(B, L, d_model) → (B, L, d_model), from a fresh (zero) cache."""
        return self.forward_with_state(u)[0]

    def forward_with_state(self, u: torch.Tensor, conv_state: torch.Tensor | None = None,
                           ssm_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run a whole sequence, optionally continuing from a cache, and return the cache after it.

        Functional: the given states are read, never written. Passing the returned states to ``step`` (or back here)
        continues the sequence exactly.

        Args:
            u: (B, L, d_model).
            conv_state: (B, conv_dim, d_conv) last conv inputs before u; zeros when None.
            ssm_state: (B, H, P, N) SSM state before u; zeros when None.

        Returns:
            y (B, L, d_model), conv_state (B, conv_dim, d_conv), ssm_state (B, H, P, N), the states in the dtypes
            of the given ones (else of ``allocate_inference_cache``).
        """
        cfg = self.cfg
        batch, seqlen, _ = u.shape
        scan_dtype = torch.promote_types(u.dtype, torch.float32)
        z, xBC, dt = self._split(self.in_proj(u))  # (B, L, d_inner), (B, L, conv_dim), (B, L, H)

        if conv_state is None:
            conv_state = u.new_zeros(batch, cfg.conv_dim, cfg.d_conv, dtype=xBC.dtype)
        history = torch.cat([conv_state.to(xBC.dtype), xBC.transpose(1, 2)], dim=-1)  # (B, conv_dim, d_conv + L)
        # The state holds the last d_conv inputs; the next output reads the last d_conv - 1 of them.
        conv_out = F.conv1d(history[..., 1:], self.conv1d.weight, self.conv1d.bias, groups=cfg.conv_dim)
        xBC = F.silu(conv_out).transpose(1, 2)  # (B, L, conv_dim)
        new_conv_state = history[..., -cfg.d_conv:].to(conv_state.dtype).contiguous()  # (B, conv_dim, d_conv)

        x, B, C, dt, A = self._ssm_inputs(xBC, dt, scan_dtype)  # (B, L, H, P), (B, L, G, N) x2, (B, L, H), (H,)
        initial_state = None if ssm_state is None else ssm_state.to(scan_dtype)
        fused = self._fused_for(u)
        if fused is not None:
            # dt already has softplus and bias, and D is added below, so the kernel does exactly ssd_chunked's job.
            # Under autocast x, B and C go in as the autocast dtype (bf16), as mamba_ssm's own Mamba2 feeds them (its
            # conv output): the kernel accumulates in fp32 itself, and fp32 inputs would double its memory traffic.
            # dt and A stay fp32: exp(dt * A) is where precision matters, and the kernel casts dt to fp32 anyway.
            io_dtype = _autocast_dtype(u.device.type) or scan_dtype
            y, final_state = fused(x.to(io_dtype).contiguous(), dt.contiguous(), A.float(),
                                   B.to(io_dtype).contiguous(), C.to(io_dtype).contiguous(), cfg.chunk_size,
                                   initial_states=initial_state, return_final_states=True)
            y, final_state = y.to(scan_dtype), final_state.to(scan_dtype)
        else:
            y, final_state = ssd_chunked(x, dt, A, B, C, cfg.chunk_size, initial_state)  # (B, L, H, P)
        state_dtype = self.in_proj.weight.dtype if ssm_state is None else ssm_state.dtype
        return self._output(y, x, z, u.dtype), new_conv_state, final_state.to(state_dtype)

    def step(self, u_t: torch.Tensor, conv_state: torch.Tensor,
             ssm_state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One time step, mamba_ssm's convention: u_t (B, 1, d_model) → out (B, 1, d_model).

        Updates ``conv_state`` (B, conv_dim, d_conv) and ``ssm_state`` (B, H, P, N) in place, as mamba_ssm does,
        and returns them alongside the output.
        """
        cfg = self.cfg
        if u_t.dim() != 3 or u_t.shape[1] != 1:
            raise ValueError(f"step takes one token shaped (B, 1, d_model), got {tuple(u_t.shape)}; "
                             "run longer sequences through forward_with_state")
        scan_dtype = torch.promote_types(u_t.dtype, torch.float32)
        z, xBC, dt = self._split(self.in_proj(u_t[:, 0]))  # (B, d_inner), (B, conv_dim), (B, H)

        conv_state.copy_(torch.roll(conv_state, shifts=-1, dims=-1))
        conv_state[:, :, -1] = xBC
        xBC = (conv_state * self.conv1d.weight[:, 0, :]).sum(dim=-1)  # (B, conv_dim)
        if self.conv1d.bias is not None:
            xBC = xBC + self.conv1d.bias
        xBC = F.silu(xBC).to(u_t.dtype)

        x, B, C, dt, A = self._ssm_inputs(xBC, dt, scan_dtype)  # (B, H, P), (B, G, N) x2, (B, H), (H,)
        B, C = _heads_from_groups(B, cfg.nheads), _heads_from_groups(C, cfg.nheads)  # (B, H, N)
        decay = torch.exp(dt * A)  # (B, H)
        state = ssm_state.to(scan_dtype) * decay[:, :, None, None] + torch.einsum("bh,bhp,bhn->bhpn", dt, x, B)
        ssm_state.copy_(state)
        y = torch.einsum("bhpn,bhn->bhp", state, C)  # (B, H, P)
        return self._output(y, x, z, u_t.dtype)[:, None], conv_state, ssm_state  # (B, 1, d_model)
