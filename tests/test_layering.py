"""The package's architecture, held: no import circle between its modules and no import from a lower
layer up to a higher one (every import counts, those inside functions too), and no folder holding
more than a fifth of the lines. Walked with ast over the source, so a circle hidden by a lazy import
is found as well."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "alac"

# bottom first: a module may import from its own layer and the ones below it
LAYERS = (
    ("alac", "alac.errors", "alac.checksums", "alac.temporary", "alac.counter_random", "alac.metrics", "alac.cache",
     "alac.outputs", "alac.defaults", "alac.optional"),
    ("alac.data",),
    ("alac.dsl", "alac.optimizers", "alac.ir", "alac.models"),
    ("alac.codegen",),
    ("alac.plan",),
    ("alac.runtime", "alac.runtime.device", "alac.runtime.ranks"),
    ("alac.runtime.movement",),
    ("alac.runtime.execution",),
    ("alac.runtime.rows", "alac.runtime.solvers"),
    ("alac.runtime.planning",),
    ("alac.nn",),
    ("alac.train",),
    ("alac.sklearn", "alac.cli", "alac.__main__"),
)
MAX_FOLDER_SHARE = 0.2


def modules():
    """module name -> its file, for every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_graph(found):
    """module -> the package's modules it imports."""
    graph = defaultdict(set)
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parents = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*parents, base] if base else parents)
                # `from package import module` imports the module; any other name imports the package
                submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in found]
                targets = [*submodules, *([base] if len(submodules) < len(node.names) else [])]
            else:
                continue
            for target in targets:
                while target and target not in found:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def layer_of(name):
    best, layer = "", None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
                best, layer = prefix, index
    return layer


def test_every_module_has_a_layer():
    assert [name for name in modules() if layer_of(name) is None] == []


def test_no_import_circle_between_modules():
    graph = nx.DiGraph([(name, target) for name, targets in import_graph(modules()).items() for target in targets])
    circles = [sorted(component) for component in nx.strongly_connected_components(graph) if len(component) > 1]
    assert circles == []


def test_no_import_up_the_layers():
    up = sorted(f"{name} -> {target}" for name, targets in import_graph(modules()).items() for target in targets
                if layer_of(target) > layer_of(name))
    assert up == []


def test_no_folder_holds_over_a_fifth_of_the_lines():
    lines = {path: len(path.read_text().splitlines()) for path in modules().values()}
    total = sum(lines.values())
    per_folder = defaultdict(int)
    for path, count in lines.items():
        per_folder[str(path.parent.relative_to(PACKAGE.parent))] += count
    assert {folder: round(count / total, 3) for folder, count in per_folder.items()
            if count > MAX_FOLDER_SHARE * total} == {}


def test_the_walk_finds_a_circle_and_an_import_up(tmp_path, monkeypatch):
    """The checks above can fail: a planted circle through a lazy import and an import up are found."""
    package = tmp_path / "alac"
    (package / "runtime").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "runtime" / "__init__.py").write_text("")
    (package / "errors.py").write_text("def f():\n    from alac.runtime import a\n")
    (package / "runtime" / "a.py").write_text("from alac.errors import f\n")
    monkeypatch.setattr(f"{__name__}.PACKAGE", package)
    graph = import_graph(modules())
    assert graph["alac.errors"] == {"alac.runtime.a"}
    assert graph["alac.runtime.a"] == {"alac.errors"}
    assert layer_of("alac.runtime.a") > layer_of("alac.errors")
