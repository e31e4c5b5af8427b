"""Training throughput of the Pokémon policy: turns (tokens) per second and model FLOPs utilization.

    python benchmarks/policy_throughput.py --presets small large            # on a GPU: bf16 autocast, TF32
    python benchmarks/policy_throughput.py --presets tiny small --device cpu

A token is one turn of a context window. Model FLOPs per token (PaLM's appendix B): 6·N for the weight matrices
(N = parameters outside embedding tables, which are lookups) plus 12·layers·context·d_model for attention scores and
values, forward and backward. MFU = FLOPs per token × tokens/s ÷ ``--peak-tflops``, the device's peak dense bf16
FLOP/s: 989 by default on CUDA (H100/H200 SXM; pass 312 for an A100); on CPU MFU is printed only when
``--peak-tflops`` is given (a CPU has no agreed peak). Inputs are random but shaped and typed like real batches
(vocabulary-sized ids, legal masks with every action legal), which does not change the arithmetic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

# benchmarks/ is not an installed package (pyproject's packages.find): the checkout's root on the path imports it
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import peak_memory, reset_peak_memory, seconds_per_call
from models.pokemon_policy import PokemonPolicy, PolicyConfig
from pipelines.pokemon.observation import vocabulary
from shards_schema.pokemon import OBS_NUMERIC, OBS_WORDS
from training.pokemon.offline_rl import TrainConfig, compute_losses

H100_BF16_PEAK_TFLOPS = 989.0
"""Dense bf16 tensor-core peak of an H100 SXM (also an H200's), from NVIDIA's data sheet: the default on CUDA."""


def flops_per_token(model: nn.Module, n_layers: int, context: int, d_model: int) -> float:
    weights = sum(p.numel() for m in model.modules() if not isinstance(m, nn.Embedding)
                  for p in m.parameters(recurse=False))
    return 6.0 * weights + 12.0 * n_layers * context * d_model


def measure(preset: str, device: torch.device, batch: int, context: int, steps: int, compile: bool = False,
            peak_tflops: float | None = None) -> dict:
    """Tokens/s of training steps; MFU against ``peak_tflops`` (None: no MFU)."""
    torch.manual_seed(0)
    cfg = PolicyConfig.preset(preset, len(vocabulary()))
    model = PokemonPolicy(cfg).to(device)
    if compile:
        model.compile()  # in place, as the trainers' --compile: parameter names unchanged
    reset_peak_memory(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    batch_data = {
        "tokens": torch.randint(2, cfg.vocab_size, (batch, context, OBS_WORDS), device=device),
        "numeric": torch.randn(batch, context, OBS_NUMERIC, device=device),
        "legal": torch.ones(batch, context, 9, dtype=torch.bool, device=device),
        "valid": torch.ones(batch, context, dtype=torch.bool, device=device),
        "action": torch.randint(0, 9, (batch, context), device=device),
        "reward": torch.zeros(batch, context, device=device),
        "done": torch.zeros(batch, context, dtype=torch.bool, device=device),
    }
    train_cfg = TrainConfig(shards="-", out="-", preset=preset, context=context, batch_size=batch)
    gammas = torch.tensor(cfg.gammas, device=device)
    cuda = device.type == "cuda"

    def step():
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = compute_losses(model, batch_data, train_cfg, gammas)[0]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    tokens_per_s = batch * context / seconds_per_call(step, steps, warmup=3, cuda=cuda)
    per_token = flops_per_token(model, cfg.n_layers, context, cfg.d_model)
    name = torch.cuda.get_device_name(device) if cuda else "CPU"
    mfu = per_token * tokens_per_s / (peak_tflops * 1e12) if peak_tflops else None
    return {"preset": preset, "parameters": model.num_parameters(), "tokens_per_s": tokens_per_s,
            "flops_per_token": per_token, "mfu": mfu, "device": name,
            "memory": peak_memory(device)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--presets", nargs="+", default=["small", "large"])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (nn.Module.compile)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help=f"the device's peak dense bf16 TFLOP/s for MFU (default on CUDA: "
                             f"{H100_BF16_PEAK_TFLOPS:g}, an H100 SXM; A100: 312; on CPU no MFU unless given)")
    args = parser.parse_args()
    device = torch.device(args.device)
    peak_tflops = args.peak_tflops
    if peak_tflops is None and device.type == "cuda":
        peak_tflops = H100_BF16_PEAK_TFLOPS
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    for preset in args.presets:
        r = measure(preset, device, args.batch, args.context, args.steps, args.compile, peak_tflops)
        mfu = (f"MFU {r['mfu']:.1%} of {peak_tflops:g} TFLOP/s" if r["mfu"] is not None
               else "MFU n/a (pass --peak-tflops)")
        print(f"{r['device']}: {preset} ({r['parameters'] / 1e6:.1f}M parameters), batch {args.batch} x "
              f"{args.context} turns: {r['tokens_per_s']:,.0f} tokens/s, {r['flops_per_token'] / 1e6:.1f} MFLOP/token, "
              f"{mfu}, {r['memory']}{', compiled' if args.compile else ''}")


if __name__ == "__main__":
    main()
