"""The engine stacks in layers: no module imports from a layer above its own, no circles.

Layers, lowest first: dev (private servers and failpoints: it imports nothing of the engine, so
anything may use it), the core (settings, keys, jobs, tasks, errors...: no I/O), transport, seam,
ops, running and stream, producing, the resources (jobs, queues, dead letters, workers), periodic
and worker, and on top what assembles them (the client, the process's producer, the command
line, the package's public API).

Every import counts: at the top of a module, inside a function, and under `if TYPE_CHECKING:`
too. A type-only import still ties a module to the other's names, and `typing.get_type_hints()`
imports it for real; a knot hidden behind TYPE_CHECKING is still a knot. A module that needs only
a narrow face of a collaborator above it declares that face itself (a `Protocol`), or is handed
the collaborator as a parameter.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import engine

ROOT = Path(engine.__file__).parent
# Lowest first; each layer by the names of its top-level modules and subpackages ("" is the
# package itself: engine/__init__.py).
LAYERS: list[tuple[str, set[str]]] = [
    ("dev", {"dev"}),
    (
        "core",
        {
            "errors",
            "fields",
            "serializer",
            "settings",
            "keys",
            "backoff",
            "result",
            "limits",
            "job",
            "task",
            "arguments",
        },
    ),
    ("transport", {"transport"}),
    ("seam", {"seam"}),
    ("ops", {"ops"}),
    ("running/stream", {"running", "stream"}),
    ("producing", {"producing"}),
    ("resources", {"resources"}),
    ("periodic/worker", {"periodic", "worker"}),
    ("top", {"client", "producer", "cli", "__main__", ""}),
]
PACKAGES = [
    head for _, heads in LAYERS for head in heads if (ROOT / head / "__init__.py").is_file()
]


def modules() -> dict[str, Path]:
    """Return every module of the engine by dotted name below `engine` ("": the package)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts).removesuffix("__init__").rstrip(".")] = path
    return found


def head(name: str) -> str:
    return name.split(".")[0]


def layer(name: str) -> int:
    for at, (_, heads) in enumerate(LAYERS):
        if head(name) in heads:
            return at
    raise AssertionError(f"engine.{name} is in no layer: put it in one in {__file__}")


def imports(name: str, path: Path, known: set[str]) -> dict[str, int]:
    """Return the engine's modules that `name` imports, each with the line of its first import.

    `from M import a` imports module M.a when there is one, else M (a name of M).
    """
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module == "engine" or (node.module or "").startswith("engine."):
                module = (node.module or "").removeprefix("engine").lstrip(".")
            else:
                continue
            for alias in node.names:
                sub = f"{module}.{alias.name}".lstrip(".")
                targets.append(sub if sub in known else module)
        elif isinstance(node, ast.Import):
            targets = [
                a.name.removeprefix("engine.") for a in node.names if a.name.startswith("engine.")
            ]
        for target in targets:
            if target in known and target != name:
                found.setdefault(target, node.lineno)
    return found


def graph() -> dict[str, dict[str, int]]:
    known = modules()
    return {name: imports(name, path, set(known)) for name, path in known.items()}


def where(name: str) -> str:
    return f"engine.{name}" if name else "engine"


def circles(edges: dict[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """Return each strongly connected component of more than one node with one circle in it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return [(c, _one_circle(edges, set(c))) for c in components]


def _one_circle(edges: dict[str, set[str]], component: set[str]) -> list[str]:
    """Return a circle within `component`, from its first node back to it."""
    start = min(component)
    trail, seen = [start], {start}
    while True:
        nxt = sorted(n for n in edges[trail[-1]] if n in component)
        if start in nxt:
            return [*trail, start]
        ahead = [n for n in nxt if n not in seen] or nxt
        if ahead[0] in seen:  # loop back: cut the trail to the circle it closes
            return [*trail[trail.index(ahead[0]) :], ahead[0]]
        trail.append(ahead[0])
        seen.add(ahead[0])


def test_every_module_is_in_a_layer() -> None:
    unplaced = []
    for name in modules():
        try:
            layer(name)
        except AssertionError as exc:
            unplaced.append(str(exc))
    assert not unplaced, "\n".join(unplaced)


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = [
        f"{modules()[name].relative_to(ROOT.parent)}:{line}: {where(name)} "
        f"({LAYERS[layer(name)][0]}) imports {where(target)} ({LAYERS[layer(target)][0]})"
        for name, targets in graph().items()
        for target, line in sorted(targets.items())
        if layer(target) > layer(name)
    ]
    assert not upward, "imports from a layer above:\n" + "\n".join(upward)


def test_no_import_circles_between_modules() -> None:
    lines = graph()
    # a package imports its own modules at most to re-export them: that edge is no circle
    edges = {n: {t for t in ts if not t.startswith(f"{n}.")} for n, ts in lines.items()}
    found = [
        f"{len(knot)} modules ({', '.join(map(where, knot))}), as in: "
        + " -> ".join(f"{where(a)}:{lines[a][b]}" for a, b in itertools.pairwise(circle))
        + f" -> {where(circle[-1])}"
        for knot, circle in circles(edges)
    ]
    assert not found, "import circles:\n" + "\n".join(found)


def test_no_import_circles_between_subpackages() -> None:
    """The packages of one layer (running and stream, periodic and worker) form no knot either."""
    edges: dict[str, set[str]] = {}
    why: dict[tuple[str, str], str] = {}
    for name, targets in graph().items():
        for target, line in sorted(targets.items()):
            if name and head(target) != head(name):
                edges.setdefault(head(name), set()).add(head(target))
                why.setdefault(
                    (head(name), head(target)), f"{where(name)}:{line} -> {where(target)}"
                )
    found = [
        " -> ".join(circle) + " (" + "; ".join(why[p] for p in itertools.pairwise(circle)) + ")"
        for _, circle in circles(edges)
    ]
    assert not found, "circles between packages:\n" + "\n".join(found)


def test_every_subpackage_says_its_one_concern_in_one_line() -> None:
    for package in PACKAGES:
        doc = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text())) or ""
        assert len(doc.splitlines()) == 1 and doc.endswith("."), package


def test_the_rules_see_every_form_of_import(tmp_path: Path) -> None:
    known = set(modules()) | {"client", "worker.unit"}
    module = tmp_path / "held.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from ..seam import scripts\n"
        "from . import faults\n"
        "if TYPE_CHECKING:\n"
        "    from ..client import Client\n"
        "def later():\n"
        "    from engine.worker.unit import RunningJob\n"
        "    import engine.resources.metrics\n"
        "    from engine import Client\n"
    )
    found = imports("transport.held", module, known)
    assert found == {
        "seam.scripts": 2,
        "transport.faults": 3,
        "client": 5,
        "worker.unit": 7,
        "resources.metrics": 8,
        "": 9,
    }
    assert all(layer(t) > layer("transport.held") for t in found if t != "transport.faults")


def test_the_circle_finder_names_each_knot() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert circles(edges) == [
        (["a", "b", "c"], ["a", "b", "c", "a"]),
        (["e", "f"], ["e", "f", "e"]),
    ]
    assert circles({"a": {"b"}, "b": set()}) == []
