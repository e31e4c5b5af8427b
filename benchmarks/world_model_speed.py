"""World model speed on this machine: training frames/s and rollout frames/s of the tiny and base (~15M) presets.

    python benchmarks/world_model_speed.py [--device cpu|cuda] [--presets tiny base] [--backbones mamba2 mlp]

Training: optimizer steps on batches of windows (B × K frames predicted per step), bf16 autocast on CUDA, fp32 on
CPU. Rollout: one game frame by frame with ``step()`` after priming on a seed window (batch 1, what a player of the
model sees) and with a batch of 64 games at once (what PPO runners see). Frames/s count predicted frames per
wall-clock second; the device is printed with the figures. On CUDA with mamba_ssm installed the fused scan is used.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

# benchmarks/ is not an installed package (pyproject's packages.find): the checkout's root on the path imports it
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import peak_memory, reset_peak_memory, seconds_per_call
from models.world_model import FrameState, WorldModel, WorldModelConfig
from shards_schema.melee_features import BINARY_FIELDS, CAT_FIELDS, CONT_FIELDS, CTRL_FEATURES
from training.melee.world_model import train_step


def random_frames(batch: int, frames: int, device) -> tuple[FrameState, torch.Tensor, torch.Tensor]:
    """Inputs with the shapes and value ranges of real ones (speed does not depend on the values)."""
    g = torch.Generator().manual_seed(0)
    cat = torch.stack([torch.randint(1, classes, (batch, frames), generator=g) for _, classes in CAT_FIELDS], -1)
    state = FrameState(cont=torch.randn(batch, frames, len(CONT_FIELDS), generator=g),
                       binary=torch.randint(0, 2, (batch, frames, len(BINARY_FIELDS)), generator=g).float(),
                       cat=cat, cont_valid=torch.ones(batch, frames, len(CONT_FIELDS), dtype=torch.bool))
    state = FrameState(**{k: v.to(device) for k, v in vars(state).items()})
    ctrl = torch.rand(batch, frames, CTRL_FEATURES, generator=g).to(device)
    stage = torch.full((batch, frames), 32, device=device)
    return state, ctrl, stage


def training_frames_per_s(model, device, batch: int, context: int, steps: int) -> float:
    state, ctrl, stage = random_frames(batch, context + 1, device)
    window = {"cont": state.cont, "cont_valid": state.cont_valid, "binary": state.binary,
              "binary_valid": torch.ones_like(state.binary, dtype=torch.bool), "cat": state.cat, "ctrl": ctrl,
              "stage": stage, "valid": torch.ones(batch, context + 1, dtype=torch.bool, device=device)}
    cuda = device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda or None)  # as training/fit.Learner

    def one():
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=cuda):
            parts = train_step(model, window, sampled=False)
        optimizer.zero_grad(set_to_none=True)
        parts["total"].backward()
        optimizer.step()

    return batch * context / seconds_per_call(one, steps, cuda=cuda)


@torch.no_grad()
def rollout_frames_per_s(model, device, batch: int, frames: int) -> float:
    state, ctrl, stage = random_frames(batch, 60 + frames, device)
    model.eval()
    def frames_of(a, b):
        return FrameState(cont=state.cont[:, a:b], binary=state.binary[:, a:b], cat=state.cat[:, a:b],
                          cont_valid=state.cont_valid[:, a:b])

    _, cache = model(frames_of(0, 59), ctrl[:, :59], stage[:, :59])  # prime on the seed, then go frame by frame
    current = frames_of(59, 60)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for t in range(59, 59 + frames):
        pred, cache = model.step(current, ctrl[:, t:t + 1], stage[:, t:t + 1], cache)
        current = pred.next_state(current)
    if device.type == "cuda":
        torch.cuda.synchronize()
    model.train()
    return batch * frames / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--presets", nargs="+", default=["tiny", "base"])
    parser.add_argument("--backbones", nargs="+", default=["mamba2"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rollout-frames", type=int, default=120)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (nn.Module.compile)")
    parser.add_argument("--require-fused", action="store_true",
                        help="fail unless mamba_ssm's fused scan runs (CUDA with mamba-ssm installed)")
    args = parser.parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}")
    for preset in args.presets:
        for backbone in args.backbones:
            torch.manual_seed(0)
            fused = device.type == "cuda" or args.require_fused
            cfg = WorldModelConfig.preset(preset, backbone=backbone, use_fused=fused,
                                          require_fused=args.require_fused and backbone == "mamba2")
            model = WorldModel(cfg).to(device)
            if args.compile:
                model.compile()
            reset_peak_memory(device)
            train = training_frames_per_s(model, device, args.batch, args.context, args.steps)
            train_memory = peak_memory(device)
            single = rollout_frames_per_s(model, device, 1, args.rollout_frames)
            batched = rollout_frames_per_s(model, device, 64, max(10, args.rollout_frames // 4))
            print(f"{preset:5s} {backbone:6s} {model.num_parameters() / 1e6:6.2f}M params: training {train:10,.0f} "
                  f"frames/s (batch {args.batch} x {args.context}); rollout {single:8,.0f} frames/s (1 game), "
                  f"{batched:10,.0f} frames/s (64 games); training {train_memory}")


if __name__ == "__main__":
    main()
