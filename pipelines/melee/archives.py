"""Where Slippi replays come from, beyond what every file source shares (``pipelines/archives.py`` reads loose files
and archives of them from a local folder or any storage URI): which files are replays, the Hugging Face dataset
``--download`` mirrors at a pinned revision, and the synthetic games of the no-download demo. The job's ``slp``
source (``pipelines/melee/source.py``) plans and reads with these."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

from huggingface_hub import HfApi, hf_hub_download

from pipelines.archives import ARCHIVES
from pipelines.inputs import has_suffix
from pipelines.melee.synthetic import SyntheticGame, write_slp

REPLAY = (".slp",)
"""The suffix of a Slippi replay (any case); other files and archive members are filtered ``not_a_replay``."""


def download(repo: str, out_dir: Path, revision: str | None, patterns: list[str]) -> str:
    """Fetch the dataset files matching ``patterns`` at ``revision`` (resolved to a commit, which is returned)."""
    api = HfApi()
    info = api.dataset_info(repo, revision=revision or "main")
    files = sorted(f for f in api.list_repo_files(repo, repo_type="dataset", revision=info.sha)
                   if has_suffix(f, (*REPLAY, *ARCHIVES)) and (not patterns or any(fnmatch(f, p) for p in patterns)))
    for name in files:
        hf_hub_download(repo_id=repo, repo_type="dataset", filename=name, revision=info.sha, local_dir=str(out_dir))
    return f"{repo}@{info.sha}"


def synthetic_game(index: int, seed: int) -> bytes:
    """A deterministic synthetic 1v1 (Fox vs Marth, lasers, a rollback frame), about 40 s long."""
    return write_slp(SyntheticGame(num_frames=2400 + 60 * (index % 5), seed=seed * 100_003 + index,
                                   rollback_frames=(100 + index % 50,), shyguys=index % 2 == 1))
