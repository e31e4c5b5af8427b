"""The entry points: every console script in pyproject.toml names an importable ``main`` that is also what its file runs
by path (``python training/pokemon/offline_rl.py``, as ``ray job submit --working-dir .`` runs it on a cluster where the
project is not installed); run by path from another folder, each answers ``--help`` with no ``sys.path`` set-up of its
own; and importing one starts nothing: ``ray`` stays unimported until ``pipelines.ray_start.start_ray`` imports it (it
reads its single-machine switch once, at import), and the parse job's commands do not import torch. No Ray starts."""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
TORCH_FREE = ("pipelines.parse_replays", "pipelines.pokemon.refeaturize")
"""Entry modules of the parse job's commands: they run without torch (1.9 s to import on the dev machines)."""


def _target(name: str) -> tuple[str, str]:
    module, _, function = SCRIPTS[name].partition(":")
    return module, function


def _file_of(module: str) -> Path:
    return REPO_ROOT / (module.replace(".", "/") + ".py")


def test_the_commands_a_user_runs_are_listed():
    assert {"replayforge-parse", "replayforge-train-policy", "replayforge-train-world-model", "replayforge-evaluate",
            "replayforge-selfplay", "replayforge-sweep-scaling"} <= set(SCRIPTS)
    assert set(TORCH_FREE) <= {_target(name)[0] for name in SCRIPTS}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_console_script_is_the_main_its_file_runs(name):
    module_name, function = _target(name)
    path = _file_of(module_name)
    assert path.is_file(), f"{name} = {SCRIPTS[name]!r}: no file {path.relative_to(REPO_ROOT)} to run by path"
    assert callable(getattr(importlib.import_module(module_name), function, None)), SCRIPTS[name]
    tree = ast.parse(path.read_text())
    main_blocks = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) in (
        "__name__ == '__main__'", "'__main__' == __name__")]
    assert len(main_blocks) == 1, f"{path.relative_to(REPO_ROOT)} has no `if __name__ == '__main__':` block"
    assert [ast.unparse(s) for s in main_blocks[0].body] == [f"{function}()"], (
        f"{path.relative_to(REPO_ROOT)} run by path must call {function}(), the console script's target")


# Run in a fresh interpreter (the test process has imported ray and torch long before), from a folder outside the
# checkout: imports resolve through the installed project alone, as for `python training/x.py` on a `make setup`
# venv; each file is then run as __main__ with its own folder first on sys.path, as `python FILE` sets it.
PROBE = """
import json, runpy, sys
modules, torch_free, files = json.loads(sys.argv[1])
report = {"ray": [], "torch": [], "help": {}}
for module in modules:
    __import__(module)
    if "ray" in sys.modules and not report["ray"]:
        report["ray"].append(module)
    if module in torch_free and "torch" in sys.modules:
        report["torch"].append(module)
sys.path.remove("") if "" in sys.path else None
for path in files:
    sys.argv = [path, "--help"]
    sys.path.insert(0, path.rsplit("/", 1)[0])
    try:
        runpy.run_path(path, run_name="__main__")
        report["help"][path] = "returned"
    except SystemExit as stop:
        report["help"][path] = stop.code
    finally:
        sys.path.pop(0)
print("REPORT " + json.dumps(report))
"""


def test_entry_modules_import_no_ray_and_run_by_path(tmp_path):
    modules = list(dict.fromkeys([*TORCH_FREE, *(_target(name)[0] for name in sorted(SCRIPTS))]))
    files = [str(_file_of(m)) for m in modules]
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps([modules, list(TORCH_FREE), files])],
                          cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    report = json.loads(lines[-1].removeprefix("REPORT "))
    assert report["ray"] == [], (f"importing {report['ray'][0]} imports ray, before start_ray can set Ray's "
                                 "single-machine switch: import ray inside the function that runs after it")
    assert report["torch"] == [], f"{report['torch']} import torch on the parse job's path"
    assert report["help"] == {f: 0 for f in files}, report["help"]
