"""No import circles among the project's modules, counting every way one module reaches another: imports at the
top, inside functions and under ``TYPE_CHECKING``, and dotted strings a registry resolves at run time
(``"training.x.Class"``). A registry module that imports a module which imports the registry back is a circle too."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("pipelines", "shards_schema", "training", "models", "tune", "tools")


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def references(tree: ast.AST, known: dict[str, Path]) -> set[str]:
    """The project modules a module's source names: every import statement anywhere in it, and every string
    constant that is a module's dotted name or a module's name plus one attribute."""
    out = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.count(".") >= 1:
            names = [node.value, node.value.rpartition(".")[0]]
        out.update(name for name in names if name in known)
    return out


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: references(ast.parse(path.read_text()), known) - {name} for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_circle_finder_finds_circles_through_every_kind_of_reference():
    source = ('from a import x\n'
              'def f():\n    import b\n'
              'REGISTRY = {"c": "c.Thing"}\n')
    known = dict.fromkeys(["a", "b", "c", "d"], Path())
    assert references(ast.parse(source), known) == {"a", "b", "c"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    graph = import_graph()
    assert len(graph) > 50 and graph["pipelines.parse_replays"]  # the walk found the tree
    assert circles(graph) == []


LAYERS = ("shards_schema", "models", "pipelines", "training", "tune")
"""The packages from the bottom up: a module imports from its own package and those below it, never above."""


def layer_breaches(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, what it imports) for every import of a package above the importer's in ``LAYERS``."""
    rank = {package: i for i, package in enumerate(LAYERS)}
    out = []
    for module, imported in sorted(graph.items()):
        own = rank.get(module.split(".")[0])
        out += [(module, other) for other in sorted(imported)
                if own is not None and rank.get(other.split(".")[0], -1) > own]
    return out


def test_layer_breaches_are_found():
    assert layer_breaches({"training.a": {"tune.b", "training.c", "models.d"}, "models.d": set()}) == [
        ("training.a", "tune.b")]


def test_no_module_imports_from_a_layer_above_its_own():
    """Ladders and the flywheel write their tables through ``training.outputs``, which the sweeps use too; the
    world model reads its feature layout from ``shards_schema.melee_features``, as ``pipelines/melee/features.py``
    does. The one import upward left: the generator's checkpoint players (``pipelines.pokemon.generated`` lets a
    trained policy play a slot through ``training.pokemon.player``)."""
    assert layer_breaches(import_graph()) == [("pipelines.pokemon.generated", "training.pokemon.player")]


RAY_EXECUTORS = {"pipelines.ray_start", "pipelines.job.ray_data", "shards_schema.reader"}
"""The modules of the data side that import Ray: how every entry point starts it, the parse job's wiring into Ray
Data, and the reader's ``Dataset`` of a version. The stages, the writer, the sources and the models are plain Python."""


def ray_importers(packages: tuple[str, ...]) -> set[str]:
    """The modules of ``packages`` with an ``import ray`` or ``from ray...`` anywhere in them."""
    out = set()
    for name, path in modules().items():
        if name.split(".")[0] not in packages:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ray" for a in node.names) or \
                    isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray" and not node.level:
                out.add(name)
    return out


def test_ray_is_imported_only_by_the_data_sides_executors():
    assert ray_importers(("pipelines", "shards_schema", "models")) == RAY_EXECUTORS


RAY_TRAINING_EXECUTORS = {"training.fit", "training.selfplay"}
"""The modules of the training side that import Ray: Ray Train's launcher and a worker's start (``fit``) and
self-play's executor (runner and league actors). The tune package's sweep drivers are Ray Tune programs, all of them.
Game modules, the self-play contract, PPO, the loop's pieces and the models are plain Python."""


def test_ray_is_imported_only_by_the_training_sides_executors():
    found = ray_importers(("training", "tune"))
    assert {m for m in found if not m.startswith("tune.")} == RAY_TRAINING_EXECUTORS
