"""Check ``models/mamba2.py`` against the real ``mamba_ssm`` code on a machine without CUDA.

    python tools/check_mamba_ssm_compat.py [--version 2.2.4] [--cache .cache/mamba_ssm]

mamba-ssm does not install without CUDA, but its Python sources do not need CUDA to build a module: this downloads
the sdist from PyPI (sha256 checked against the index), imports ``mamba_ssm.modules.mamba2`` from it with Triton
replaced by an inert stand-in (kernels are only decorated at import, never run), and checks that

1. ``Mamba2`` state_dict keys, their order and shapes equal ours for several configs, and each loads into the other
   with ``strict=True``;
2. our chunked scan equals mamba_ssm's own pure-PyTorch reference, ``ssd_minimal_discrete``, on random inputs.

It prints one line per check and exits non-zero on a mismatch. On a CUDA machine with mamba-ssm installed the
fused kernels themselves are compared in ``tests/models/test_mamba2.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import tarfile
import types
import urllib.request
from pathlib import Path

import torch
import torch.nn.functional as F

from models.mamba2 import Mamba2, Mamba2Config, ssd_chunked

REPO_ROOT = Path(__file__).resolve().parents[1]


def fetch_sources(version: str, cache: Path) -> Path:
    """The unpacked sdist of mamba-ssm ``version`` (downloaded once)."""
    root = cache / f"mamba_ssm-{version}"
    if root.is_dir():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    index = urllib.request.urlopen("https://pypi.org/simple/mamba-ssm/", timeout=60).read().decode()
    match = re.search(rf'href="([^"]*mamba_ssm-{re.escape(version)}\.tar\.gz)#sha256=([0-9a-f]+)"', index)
    if match is None:
        raise SystemExit(f"mamba-ssm {version} has no sdist on PyPI")
    url, digest = match.groups()
    data = urllib.request.urlopen(url, timeout=300).read()
    if hashlib.sha256(data).hexdigest() != digest:
        raise SystemExit(f"{url}: sha256 differs from the index")
    archive = cache / f"mamba_ssm-{version}.tar.gz"
    archive.write_bytes(data)
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    return root


class _Inert:
    """Stands in for any Triton object: decorators return the function, everything else returns another _Inert."""

    def __call__(self, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else _Inert()

    def __getattr__(self, name):
        return _Inert()

    def __getitem__(self, key):
        return _Inert()


class _InertModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()


def import_reference(root: Path):
    """(mamba_ssm's Mamba2 class, its ssd_minimal_discrete), imported from the sources without running the package
    ``__init__`` (which pulls in more Triton code than the module needs)."""
    for name in ("triton", "triton.language", "triton.runtime", "triton.language.extra",
                 "triton.language.extra.cuda"):
        sys.modules.setdefault(name, _InertModule(name))
    sys.modules["triton"].language = sys.modules["triton.language"]
    sys.modules["triton"].__version__ = "3.1.0"
    for package in ("mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.triton", "mamba_ssm.modules", "mamba_ssm.distributed"):
        module = types.ModuleType(package)
        module.__path__ = [str(root / package.replace(".", "/"))]
        sys.modules[package] = module
    # only now: these resolve through the stand-ins and package paths set above (downloaded sources, no install)
    from mamba_ssm.modules.mamba2 import Mamba2 as ReferenceMamba2
    from mamba_ssm.modules.ssd_minimal import ssd_minimal_discrete

    return ReferenceMamba2, ssd_minimal_discrete


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", default="2.2.4")
    parser.add_argument("--cache", default=str(REPO_ROOT / ".cache" / "mamba_ssm"))
    args = parser.parse_args()
    try:
        import einops  # noqa: F401 - mamba_ssm's modules import it; not a dependency of ours, so checked here
    except ImportError:
        raise SystemExit("mamba_ssm's sources need einops: pip install einops") from None
    Reference, ssd_minimal_discrete = import_reference(fetch_sources(args.version, Path(args.cache)))
    ok = True
    for shape in (dict(d_model=64, d_state=16, headdim=16, expand=2, ngroups=1),
                  dict(d_model=128, d_state=32, headdim=32, expand=2, ngroups=2),
                  dict(d_model=96, d_state=64, headdim=48, expand=2, ngroups=1, bias=True, conv_bias=False)):
        ref, ours = Reference(**shape, device="cpu"), Mamba2(Mamba2Config(**shape))
        same = [(k, tuple(v.shape)) for k, v in ref.state_dict().items()] == \
            [(k, tuple(v.shape)) for k, v in ours.state_dict().items()]
        ours.load_state_dict(ref.state_dict(), strict=True)
        ref.load_state_dict(ours.state_dict(), strict=True)
        print(f"{shape}: keys, order and shapes {'equal' if same else 'DIFFER'}; strict load both ways ok")
        ok &= same
    torch.manual_seed(0)
    b, length, h, p, n = 2, 200, 4, 8, 16
    x = torch.randn(b, length, h, p, dtype=torch.float64)
    dt = F.softplus(torch.randn(b, length, h, dtype=torch.float64))
    A = -torch.rand(h, dtype=torch.float64) - 0.5
    B, C = torch.randn(b, length, 1, n, dtype=torch.float64), torch.randn(b, length, 1, n, dtype=torch.float64)
    y_ref, state_ref = ssd_minimal_discrete(x * dt[..., None], A * dt, B.expand(-1, -1, h, -1),
                                            C.expand(-1, -1, h, -1), 40)  # its length must divide into blocks
    y, state = ssd_chunked(x, dt, A, B, C, 40)
    error = max((y - y_ref).abs().max().item(), (state - state_ref).abs().max().item())
    print(f"ssd_chunked vs mamba_ssm's ssd_minimal_discrete (float64, L={length}): max abs difference {error:.2e}")
    ok &= error < 1e-9
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
