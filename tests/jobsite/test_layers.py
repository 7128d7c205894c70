"""The app's wings stack in layers: no module imports from a wing above its own, no circles.

Layers, lowest first: the base modules (models, settings, permissions...), then services (the one
way into the engine), tasks, history, api, web, admin, and on top what assembles them (the app
config, checks, URLs, management commands). Every import counts, those inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jobsite.jobs

APP = Path(jobsite.jobs.__file__).parent
BASE = {"models", "conf", "permissions", "audit", "search", "debug", "heap"}
WINGS = ["services", "tasks", "history", "api", "web", "admin"]
TOP = {"apps", "checks", "urls", "management", "backends"}


def modules() -> dict[str, Path]:
    """Return every module of the app (migrations aside) by dotted name below jobsite.jobs."""
    found = {}
    for path in sorted(APP.rglob("*.py")):
        parts = path.relative_to(APP).with_suffix("").parts
        if parts[0] == "migrations":
            continue
        name = ".".join(parts).removesuffix("__init__").rstrip(".")
        if name:
            found[name] = path
    return found


def layer(name: str) -> int:
    head = name.split(".")[0]
    if head in BASE:
        return 0
    if head in WINGS:
        return 1 + WINGS.index(head)
    assert head in TOP, f"jobsite.jobs.{name} is in no layer: put it in a wing, the base or top"
    return 1 + len(WINGS)


def imports(name: str, path: Path, known: set[str], top_level_only: bool) -> set[str]:
    """Return the app's modules that `name` imports."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            elif (node.module or "").startswith("jobsite.jobs"):
                module = node.module.removeprefix("jobsite.jobs").lstrip(".")  # type: ignore[union-attr]
            else:
                continue
            targets = [f"{module}.{a.name}".lstrip(".") for a in node.names] + [module]
        elif isinstance(node, ast.Import):
            targets = [
                a.name.removeprefix("jobsite.jobs").lstrip(".")
                for a in node.names
                if a.name.startswith("jobsite.jobs.")
            ]
        found |= {t for t in targets if t in known and t != name}
    return found


def test_no_module_imports_from_a_wing_above_its_own() -> None:
    known = modules()
    upward = [
        f"{name} -> {target}"
        for name, path in known.items()
        for target in imports(name, path, set(known), top_level_only=False)
        if layer(target) > layer(name)
    ]
    assert upward == []


def test_no_import_circles() -> None:
    known = modules()
    graph = {n: imports(n, p, set(known), top_level_only=False) for n, p in known.items()}
    # a package imports its own modules at most to re-export them: that edge is no circle
    graph = {n: {t for t in ts if not t.startswith(f"{n}.")} for n, ts in graph.items()}
    circles = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*trail[trail.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert circles == []


def test_every_wing_says_its_one_concern_in_one_line() -> None:
    for wing in WINGS:
        doc = ast.get_docstring(ast.parse((APP / wing / "__init__.py").read_text())) or ""
        lines = doc.splitlines()
        # one line; a wing whose package module holds code may say more after a blank line
        assert lines and lines[0].endswith(".") and (len(lines) == 1 or not lines[1]), wing


def test_the_rules_see_every_form_of_import(tmp_path: Path) -> None:
    known = set(modules())
    module = tmp_path / "engineloop.py"
    module.write_text(
        "from ..api import schemas\n"
        "def later():\n"
        "    from jobsite.jobs.web.live import x\n"
        "    import jobsite.jobs.admin.listing\n"
    )
    found = imports("services.engineloop", module, known | {"web.live"}, top_level_only=False)
    assert found == {"api", "api.schemas", "web.live", "admin.listing"}
    assert imports("services.engineloop", module, known, top_level_only=True) == {
        "api",
        "api.schemas",
    }
    assert all(layer(t) > layer("services.engineloop") for t in found)


def test_the_app_imports_only_what_the_engine_exports() -> None:
    import engine

    reached = []
    for path in sorted(APP.parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("engine"):
                if node.module != "engine":
                    reached.append(f"{path.name}: from {node.module}")
                reached += [
                    f"{path.name}: engine.{a.name}"
                    for a in node.names
                    if a.name not in engine.__all__
                ]
            elif isinstance(node, ast.Import):
                reached += [f"{path.name}: {a.name}" for a in node.names if "engine." in a.name]
    assert reached == []
