"""Mamba-2 block: the chunked scan equals the step-by-step recurrence, step() equals forward(), parameters match
mamba_ssm's Mamba2 by name and shape, the block is causal and trains."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from models import mamba2
from models.mamba2 import GatedRMSNorm, Mamba2, Mamba2Config, fused_available, ssd_chunked, ssd_naive


def _scan_inputs(batch=2, seqlen=13, nheads=4, headdim=3, ngroups=2, d_state=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, seqlen, nheads, headdim, generator=g, dtype=dtype)
    dt = F.softplus(torch.randn(batch, seqlen, nheads, generator=g, dtype=dtype) - 1)
    A = -torch.exp(torch.rand(nheads, generator=g, dtype=dtype))
    B = torch.randn(batch, seqlen, ngroups, d_state, generator=g, dtype=dtype)
    C = torch.randn(batch, seqlen, ngroups, d_state, generator=g, dtype=dtype)
    h0 = torch.randn(batch, nheads, headdim, d_state, generator=g, dtype=dtype)
    return x, dt, A, B, C, h0


def _block(seed=0, dtype=torch.float64, **overrides):
    torch.manual_seed(seed)
    block = Mamba2(Mamba2Config.tiny(**overrides)).to(dtype)
    # Random D and norm weights so a wrong skip or norm shows up (both are ones at init).
    with torch.no_grad():
        block.D.normal_()
        block.norm.weight.normal_()
    return block


def _tokens(block, batch=2, seqlen=11, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, seqlen, block.cfg.d_model, generator=g, dtype=block.in_proj.weight.dtype)


@pytest.mark.parametrize("seqlen", [1, 3, 4, 13, 16])
@pytest.mark.parametrize("ngroups", [1, 2])
@pytest.mark.parametrize("with_initial_state", [False, True])
def test_chunked_scan_equals_naive_recurrence(seqlen, ngroups, with_initial_state):
    x, dt, A, B, C, h0 = _scan_inputs(seqlen=seqlen, ngroups=ngroups)
    h0 = h0 if with_initial_state else None
    y_ref, h_ref = ssd_naive(x, dt, A, B, C, h0)
    y, h = ssd_chunked(x, dt, A, B, C, chunk_size=4, initial_state=h0)
    assert y.shape == x.shape and h.shape == h_ref.shape == (2, 4, 3, 5)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(h, h_ref, rtol=1e-10, atol=1e-10)


def test_naive_recurrence_by_hand():
    """One head, one state channel: h_t = exp(dt A) h_{t-1} + dt x B, y = h C, written out with Python floats."""
    x, dt, A, B, C, h0 = _scan_inputs(batch=1, seqlen=3, nheads=1, headdim=1, ngroups=1, d_state=1)
    y, h = ssd_naive(x, dt, A, B, C, h0)
    state = h0.item()
    for t in range(3):
        state = math.exp(dt[0, t, 0].item() * A[0].item()) * state + dt[0, t, 0].item() * x[0, t, 0, 0].item() * \
            B[0, t, 0, 0].item()
        assert y[0, t, 0, 0].item() == pytest.approx(state * C[0, t, 0, 0].item(), rel=1e-12)
    assert h.item() == pytest.approx(state, rel=1e-12)


def test_chunk_size_does_not_change_the_result():
    x, dt, A, B, C, h0 = _scan_inputs(seqlen=21)
    y1, h1 = ssd_chunked(x, dt, A, B, C, chunk_size=1, initial_state=h0)
    for chunk_size in (5, 21, 64):
        y, h = ssd_chunked(x, dt, A, B, C, chunk_size=chunk_size, initial_state=h0)
        torch.testing.assert_close(y, y1, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(h, h1, rtol=1e-10, atol=1e-10)


def test_chunked_scan_float32_long_sequence_is_stable():
    """Large decays over a long sequence: no NaN/inf, and close to the float64 reference."""
    x, dt, A, B, C, h0 = _scan_inputs(batch=1, seqlen=300, seed=3)
    y_ref, h_ref = ssd_naive(x, dt * 4, A, B, C, h0)
    y, h = ssd_chunked(*(t.float() for t in (x, dt * 4, A, B, C)), chunk_size=64, initial_state=h0.float())
    assert torch.isfinite(y).all() and torch.isfinite(h).all()
    torch.testing.assert_close(y.double(), y_ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(h.double(), h_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ngroups", [1, 2])
def test_step_by_step_equals_forward(ngroups):
    block = _block(ngroups=ngroups)
    u = _tokens(block, seqlen=11)
    y_full, conv_full, ssm_full = block.forward_with_state(u)
    torch.testing.assert_close(block(u), y_full)
    conv_state, ssm_state = block.allocate_inference_cache(2)
    outs = []
    for t in range(u.shape[1]):
        out, conv_returned, ssm_returned = block.step(u[:, t:t + 1], conv_state, ssm_state)
        assert conv_returned is conv_state and ssm_returned is ssm_state  # updated in place
        assert out.shape == (2, 1, block.cfg.d_model)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, dim=1), y_full, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(conv_state, conv_full, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ssm_state, ssm_full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("prefix_len", [1, 2, 5, 8])
def test_prime_with_prefix_then_step_equals_forward(prefix_len):
    """Prefixes shorter and longer than d_conv (4) and than chunk_size (4)."""
    block = _block()
    u = _tokens(block, seqlen=12)
    y_full = block(u)
    y_prefix, conv_state, ssm_state = block.forward_with_state(u[:, :prefix_len])
    outs = [y_prefix]
    for t in range(prefix_len, u.shape[1]):
        outs.append(block.step(u[:, t:t + 1], conv_state, ssm_state)[0])
    torch.testing.assert_close(torch.cat(outs, dim=1), y_full, rtol=1e-10, atol=1e-10)


def test_forward_with_state_continues_in_pieces_and_leaves_inputs_alone():
    block = _block()
    u = _tokens(block, seqlen=13)
    y_full, conv_full, ssm_full = block.forward_with_state(u)
    conv_state, ssm_state = None, None
    pieces = []
    for start, stop in [(0, 3), (3, 4), (4, 10), (10, 13)]:
        before = None if conv_state is None else (conv_state.clone(), ssm_state.clone())
        y, new_conv, new_ssm = block.forward_with_state(u[:, start:stop], conv_state, ssm_state)
        if before is not None:  # functional: the given states are not written
            assert torch.equal(conv_state, before[0]) and torch.equal(ssm_state, before[1])
        pieces.append(y)
        conv_state, ssm_state = new_conv, new_ssm
    torch.testing.assert_close(torch.cat(pieces, dim=1), y_full, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(conv_state, conv_full)
    torch.testing.assert_close(ssm_state, ssm_full, rtol=1e-10, atol=1e-10)


def test_step_rejects_a_sequence():
    block = _block()
    conv_state, ssm_state = block.allocate_inference_cache(2)
    with pytest.raises(ValueError, match=r"\(B, 1, d_model\)"):
        block.step(_tokens(block, seqlen=2), conv_state, ssm_state)


# Derived by hand from mamba_ssm/modules/mamba2.py for d_model=64, d_state=16, headdim=16, expand=2, ngroups=1:
# d_inner = 128, nheads = 8, conv_dim = 128 + 2*16 = 160, d_in_proj = 2*128 + 2*16 + 8 = 296. Order is that of
# nn.Module.state_dict: the block's own parameters (dt_bias, A_log, D, in registration order) before submodules.
EXPECTED_STATE_DICT = [
    ("dt_bias", (8,)),
    ("A_log", (8,)),
    ("D", (8,)),
    ("in_proj.weight", (296, 64)),
    ("conv1d.weight", (160, 1, 4)),
    ("conv1d.bias", (160,)),
    ("norm.weight", (128,)),
    ("out_proj.weight", (64, 128)),
]


def test_parameter_names_and_shapes_match_mamba_ssm():
    block = Mamba2(Mamba2Config(d_model=64, d_state=16, headdim=16, expand=2, ngroups=1))
    assert [(k, tuple(v.shape)) for k, v in block.state_dict().items()] == EXPECTED_STATE_DICT
    conv_state, ssm_state = block.allocate_inference_cache(3)
    assert conv_state.shape == (3, 160, 4) and ssm_state.shape == (3, 8, 16, 16)


def test_parameter_shapes_with_groups_and_biases():
    # ngroups=4: conv_dim = 128 + 2*4*16 = 256, d_in_proj = 2*128 + 2*4*16 + 8 = 392
    block = Mamba2(Mamba2Config(d_model=64, d_state=16, headdim=16, ngroups=4, bias=True, conv_bias=False))
    shapes = {k: tuple(v.shape) for k, v in block.state_dict().items()}
    assert shapes == {"dt_bias": (8,), "A_log": (8,), "D": (8,), "in_proj.weight": (392, 64), "in_proj.bias": (392,),
                      "conv1d.weight": (256, 1, 4), "norm.weight": (128,), "out_proj.weight": (64, 128),
                      "out_proj.bias": (64,)}
    assert block.norm.group_size == 32


def test_init_follows_mamba_ssm():
    cfg = Mamba2Config(d_model=64, d_state=16, headdim=8, dt_min=0.01, dt_max=0.05, A_init_range=(2.0, 3.0))
    block = Mamba2(cfg)
    dt = F.softplus(block.dt_bias)
    assert ((dt >= 0.01 - 1e-6) & (dt <= 0.05 + 1e-6)).all()
    A = torch.exp(block.A_log)
    assert ((A >= 2.0) & (A <= 3.0)).all()
    assert torch.equal(block.D, torch.ones(16)) and torch.equal(block.norm.weight, torch.ones(128))


def test_state_dict_round_trip_strict():
    block = _block(seed=0)
    fresh = _block(seed=1)
    u = _tokens(block)
    assert not torch.allclose(fresh(u), block(u))
    fresh.load_state_dict(block.state_dict(), strict=True)
    torch.testing.assert_close(fresh(u), block(u), rtol=0, atol=0)


def test_gated_rmsnorm_matches_formula():
    """mamba_ssm's rms_norm_ref with norm_before_gate=False: x * silu(z), normalized per group, times weight."""
    g = torch.Generator().manual_seed(0)
    norm = GatedRMSNorm(12, group_size=4, eps=1e-5).double()
    with torch.no_grad():
        norm.weight.normal_(generator=g)
    x, z = torch.randn(2, 5, 12, generator=g, dtype=torch.float64), torch.randn(2, 5, 12, generator=g,
                                                                                  dtype=torch.float64)
    gated = x * z * torch.sigmoid(z)
    expected = torch.cat([part / torch.sqrt(part.pow(2).mean(-1, keepdim=True) + 1e-5) for part in gated.split(4, -1)],
                         dim=-1) * norm.weight
    torch.testing.assert_close(norm(x, z), expected)


def _mamba_ssm_style_forward(block, u):
    """The block written out the way mamba_ssm's non-fused forward reads: nn.Conv1d with padding d_conv - 1 cut to
    the first L outputs, heads reading group h // (H / G), D skip, rms_norm_ref(norm_before_gate=False)."""
    cfg = block.cfg
    batch, seqlen, _ = u.shape
    z, xBC, dt = block.in_proj(u).split([cfg.d_inner, cfg.conv_dim, cfg.nheads], dim=-1)
    xBC = F.silu(block.conv1d(xBC.transpose(1, 2))[..., :seqlen].transpose(1, 2))
    x, B, C = xBC.split([cfg.d_inner, cfg.ngroups * cfg.d_state, cfg.ngroups * cfg.d_state], dim=-1)
    x = x.reshape(batch, seqlen, cfg.nheads, cfg.headdim)
    heads_per_group = cfg.nheads // cfg.ngroups
    group_of_head = torch.arange(cfg.nheads) // heads_per_group
    B = B.reshape(batch, seqlen, cfg.ngroups, cfg.d_state)[:, :, group_of_head]
    C = C.reshape(batch, seqlen, cfg.ngroups, cfg.d_state)[:, :, group_of_head]
    dt = F.softplus(dt + block.dt_bias)
    A = -torch.exp(block.A_log)
    h = torch.zeros(batch, cfg.nheads, cfg.headdim, cfg.d_state, dtype=u.dtype)
    ys = []
    for t in range(seqlen):
        h = h * torch.exp(dt[:, t] * A)[:, :, None, None] + (dt[:, t, :, None, None] * x[:, t, :, :, None]
                                                              * B[:, t, :, None, :])
        ys.append((h * C[:, t, :, None, :]).sum(-1) + block.D[:, None] * x[:, t])
    y = torch.stack(ys, dim=1).reshape(batch, seqlen, cfg.d_inner) * F.silu(z)
    groups = y.reshape(batch, seqlen, cfg.ngroups, -1)
    y = (groups / torch.sqrt(groups.pow(2).mean(-1, keepdim=True) + cfg.norm_eps)).reshape(y.shape)
    return block.out_proj(y * block.norm.weight)


@pytest.mark.parametrize("ngroups", [1, 2])
def test_block_equals_mamba_ssm_style_reference(ngroups):
    block = _block(ngroups=ngroups)
    with torch.no_grad():
        block.conv1d.bias.normal_()
    u = _tokens(block, seqlen=10)
    torch.testing.assert_close(block(u), _mamba_ssm_style_forward(block, u), rtol=1e-10, atol=1e-10)


def test_causal():
    block = _block()
    u = _tokens(block, seqlen=12)
    y = block(u)
    for t in (0, 3, 6, 10):
        changed = u.clone()
        changed[:, t + 1:] = torch.randn_like(changed[:, t + 1:]) * 10
        y_changed = block(changed)
        torch.testing.assert_close(y_changed[:, :t + 1], y[:, :t + 1], rtol=1e-12, atol=1e-12)
        assert not torch.allclose(y_changed[:, t + 1:], y[:, t + 1:])


def test_gradients_flow_to_every_parameter():
    block = _block(dtype=torch.float32)
    u = _tokens(block, seqlen=9).requires_grad_()
    block(u).square().mean().backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name
    assert torch.isfinite(u.grad).all()


def test_float32_block_close_to_float64():
    block64 = _block()
    block32 = _block(dtype=torch.float32)
    block32.load_state_dict({k: v.float() for k, v in block64.state_dict().items()})
    u = _tokens(block64, seqlen=20)
    torch.testing.assert_close(block32(u.float()).double(), block64(u), rtol=1e-4, atol=1e-4)


def test_use_fused_on_cpu_takes_the_pytorch_path(monkeypatch):
    monkeypatch.setattr(mamba2, "_warned_fallback", False)
    block = _block()
    with pytest.warns(RuntimeWarning, match="PyTorch scan"):
        requested = Mamba2(dataclasses.replace(block.cfg, use_fused=True)).double()
    requested.load_state_dict(block.state_dict())
    u = _tokens(block)
    torch.testing.assert_close(requested(u), block(u), rtol=0, atol=0)


@pytest.mark.skipif(fused_available(), reason="checks the fallback, and the fused scan loads here")
def test_unavailable_fused_scan_warns_once_with_the_reason(monkeypatch, recwarn):
    monkeypatch.setattr(mamba2, "_warned_fallback", False)
    cfg = Mamba2Config.tiny(use_fused=True)
    Mamba2(cfg)
    Mamba2(cfg)  # a second block (a deeper model): no second warning
    Mamba2(Mamba2Config.tiny())  # not requested: never warns
    fallback = [w for w in recwarn if issubclass(w.category, RuntimeWarning) and "use_fused" in str(w.message)]
    assert len(fallback) == 1
    message = str(fallback[0].message)
    assert mamba2.fused_unavailable_reason() in message  # the import error / missing CUDA, verbatim
    assert "pip install --no-build-isolation" in message


@pytest.mark.skipif(fused_available(), reason="checks the fallback, and the fused scan loads here")
def test_require_fused_raises_with_the_reason_and_install_command():
    reason = mamba2.fused_unavailable_reason()
    if not torch.cuda.is_available():
        assert "torch.cuda.is_available() is False" in reason
    try:
        import mamba_ssm  # noqa: F401
    except ImportError as error:  # the usual CPU machine: the import error is part of the reason
        assert type(error).__name__ in reason
    with pytest.raises(RuntimeError, match="require_fused") as raised:
        Mamba2(Mamba2Config.tiny(use_fused=True, require_fused=True))
    assert reason in str(raised.value) and mamba2.FUSED_INSTALL in str(raised.value)
    with pytest.raises(ValueError, match="needs use_fused"):
        Mamba2Config.tiny(require_fused=True)


def test_fused_path_gets_bf16_inputs_under_autocast(monkeypatch):
    """The fused kernel's plumbing, on CPU: a stand-in kernel (ssd_chunked in fp32, returning y in x's dtype as
    mamba_chunk_scan_combined does) records its input dtypes under bf16 autocast."""
    seen = {}

    def fake_kernel(x, dt, A, B, C, chunk_size, initial_states=None, return_final_states=False):
        seen.update(x=x.dtype, dt=dt.dtype, A=A.dtype, B=B.dtype, C=C.dtype)
        y, state = ssd_chunked(x.float(), dt.float(), A.float(), B.float(), C.float(), chunk_size, initial_states)
        return y.to(x.dtype), state

    torch.manual_seed(0)
    cfg = Mamba2Config.tiny()
    plain = Mamba2(cfg)
    fused = Mamba2(cfg)
    fused.load_state_dict(plain.state_dict())
    monkeypatch.setattr(fused, "_fused_for", lambda u: fake_kernel)
    u = torch.randn(2, 11, cfg.d_model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_fused = fused(u)
        y_plain = plain(u)
    assert seen == dict(x=torch.bfloat16, dt=torch.float32, A=torch.float32, B=torch.bfloat16, C=torch.bfloat16)
    torch.testing.assert_close(y_fused.float(), y_plain.float(), rtol=0.05, atol=0.05)
    seen.clear()
    fused(u)  # without autocast the kernel gets the scan dtype (fp32)
    assert seen["x"] == torch.float32 and seen["B"] == torch.float32


@pytest.mark.skipif(not fused_available(), reason="needs CUDA and mamba_ssm")
def test_fused_scan_matches_pytorch_scan():  # pragma: no cover - runs only where mamba_ssm is installed
    torch.manual_seed(0)
    cfg = Mamba2Config(d_model=128, d_state=32, headdim=32, ngroups=2, chunk_size=64)
    plain = Mamba2(cfg).cuda()
    fused = Mamba2(dataclasses.replace(cfg, use_fused=True)).cuda()
    fused.load_state_dict(plain.state_dict())
    u = torch.randn(2, 100, 128, device="cuda")
    y, conv, ssm = plain.forward_with_state(u)
    y_f, conv_f, ssm_f = fused.forward_with_state(u)
    torch.testing.assert_close(y_f, y, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(ssm_f, ssm, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("kwargs, message", [
    (dict(d_model=10, headdim=8), "not divisible by headdim"),
    (dict(d_model=16, headdim=8, ngroups=3), "not divisible by ngroups"),
    (dict(d_model=16, headdim=8, dt_min=0.2, dt_max=0.1), "dt_min <= dt_max"),
    (dict(d_model=16, headdim=8, A_init_range=(0.0, 16.0)), "A_init_range"),
    (dict(d_model=16, headdim=8, d_conv=0), "d_conv"),
])
def test_config_rejects_inconsistent_fields(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Mamba2Config(**kwargs)
