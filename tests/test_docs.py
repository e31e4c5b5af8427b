"""The docs a user reads: a short README pointing to a page per task, and a layout page that names what the tree
holds (each module of the code folders, nothing that is not there)."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CODE_FOLDERS = ("pipelines", "shards_schema", "models", "training", "tune", "benchmarks", "tools")
README_MAX_LINES = 200


def test_readme_is_short_and_points_to_every_page():
    readme = (REPO_ROOT / "README.md").read_text()
    assert readme.count("\n") <= README_MAX_LINES
    pages = sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "docs").glob("*.md"))
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", readme))
    assert linked == set(pages), set(pages) ^ linked


def test_the_layout_page_names_every_module_and_nothing_else():
    layout = (REPO_ROOT / "docs" / "layout.md").read_text()
    missing = []
    for folder in CODE_FOLDERS:
        for path in sorted((REPO_ROOT / folder).iterdir()):
            if path.name.startswith(("_", ".")) or path.name == "__pycache__":
                continue
            if path.is_dir() and f"{path.name}/" not in layout:
                missing.append(f"{folder}/{path.name}/")
            elif path.suffix == ".py" and path.name not in layout and path.stem not in layout:
                missing.append(f"{folder}/{path.name}")
    assert not missing, f"docs/layout.md does not name: {missing}"
    named = set(re.findall(r"\b[\w]+\.(?:py|ipynb|yaml|sh|js|json)\b", layout))
    tree = {p.name for p in REPO_ROOT.rglob("*") if ".venv" not in p.parts and "node_modules" not in p.parts}
    assert not named - tree, f"docs/layout.md names files that do not exist: {sorted(named - tree)}"
