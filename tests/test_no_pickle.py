"""No pickle, dill, marshal or shelve imports, and no eval or exec, in our code."""

from __future__ import annotations

import ast
from pathlib import Path

FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "marshal", "shelve"}
ROOTS = ("engine", "jobsite", "bench")


def offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module.split(".")[0]]
        found += [f"{path}:{node.lineno} imports {n}" for n in names if n in FORBIDDEN_MODULES]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("eval", "exec")
        ):
            found.append(f"{path}:{node.lineno} calls {node.func.id}")
    return found


def test_scan_finds_nothing() -> None:
    files = [p for root in ROOTS for p in Path(root).rglob("*.py")]
    assert len(files) > 20
    assert [o for p in files for o in offences(p)] == []


def test_scan_would_catch_offences(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import pickle\nfrom marshal import loads\nexec('1')\neval('2')\n")
    assert len(offences(bad)) == 4
