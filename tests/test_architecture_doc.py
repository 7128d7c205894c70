"""docs/architecture.md names every module of the engine and of the Django app (migrations aside),
so a module added without a word about its concern fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
# Each tree, and the heading of the doc's section that describes its modules.
TREES = {"engine": "## Layers of the engine", "jobsite/jobs": "## The Django app's wings"}


def section(text: str, heading: str) -> str:
    """Return the text under `heading`, up to the next heading of its level."""
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def named(text: str, path: str) -> bool:
    """Say whether `text` names `path` as a token (not inside a longer path or word); a package
    (`name/`) is also named by the path of one inside it (`name/sub/`)."""
    after = "" if path.endswith("/") else r"(?![\w])"
    return re.search(r"(?<![\w/.])" + re.escape(path) + after, text) is not None


def row_package(row: str) -> str | None:
    """Return the package a table row is about (its first cell is `name/`), if any."""
    first = row.strip("|").split("|", 1)[0].strip()
    found = re.fullmatch(r"`([\w/]+/)`", first)
    return found.group(1) if found else None


def mentioned(doc: str, tree: str, module: Path) -> bool:
    """Say whether the tree's section of the doc names `module` (a path below `tree`) as its
    format allows: by its path from the repository or from the tree; a package's `__init__.py` by
    the package; a module of a package by its file name in a table row that names the package; a
    module at the top of the tree by its file name outside the rows of packages."""
    relative = module.as_posix()
    text = section(doc, TREES[tree])
    if named(text, f"{tree}/{relative}"):
        return True
    if len(module.parts) == 1:
        outside = [line for line in text.splitlines() if not row_package(line)]
        return named("\n".join(outside), module.name)
    if named(text, relative):
        return True
    rows = [line for line in text.splitlines() if line.startswith("|")]
    package = module.parent.as_posix() + "/"
    if module.name == "__init__.py":
        return named(text, package)
    return any(named(row, package) and named(row, module.name) for row in rows)


def modules(tree: str) -> list[Path]:
    """Return the Python modules of `tree` (relative to it), migrations aside."""
    base = ROOT / tree
    return sorted(
        path.relative_to(base)
        for path in base.rglob("*.py")
        if "migrations" not in path.relative_to(base).parts
    )


def test_every_module_has_a_mention_in_the_architecture_doc() -> None:
    doc = DOC.read_text()
    missing = [
        f"{tree}/{module.as_posix()}"
        for tree in TREES
        for module in modules(tree)
        if not mentioned(doc, tree, module)
    ]
    assert not missing, "docs/architecture.md does not mention:\n" + "\n".join(missing)


def test_the_check_knows_a_mention_from_a_missing_one() -> None:
    doc = (
        "## Layers of the engine\n\n| module | concern |\n|---|---|\n"
        "| `keys.py` | keys |\n| `seam/rows.py` | rows |\n| `worker/` | `book.py` (the claims) |\n"
        "\n## The Django app's wings\n\n| layer | what | modules |\n"
        "| top | assembly | `apps.py`, `management/commands/` (`runworker.py`) |\n"
    )
    for module in ("keys.py", "seam/rows.py", "worker/book.py", "worker/__init__.py"):
        assert mentioned(doc, "engine", Path(module)), module
    for module in ("book.py", "worker/unit.py", "seam/keys.py", "ops/rows.py"):
        assert not mentioned(doc, "engine", Path(module)), module
    assert mentioned(doc, "jobsite/jobs", Path("management/commands/runworker.py"))
    assert not mentioned(doc, "jobsite/jobs", Path("management/commands/reconcile.py"))
    assert not mentioned(doc, "jobsite/jobs", Path("keys.py"))
