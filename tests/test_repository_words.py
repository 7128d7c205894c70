"""The repository explains itself: no text names the systems a feature came from or a document
that lives outside the repository; a feature is named after what it does."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The systems the project started from, spelled in pieces so this file does not match itself.
# Peer systems users know (Celery, RQ, BullMQ, arq...) may still be named where compared.
ORIGINS = ["job" + "bers", "async" + "mq", "hor" + "sies", "cb" + "intel"]
# Documents that never were in the repository: the design notes and the specification the
# project was started from, and the word that stood for those documents.
OUTSIDE = [
    r"\b" + "sha" + "red/",
    r"\b(?:ARCHITECTURE|RELIABILITY|" + "SP" + r"EC)\.md\b",
    r"\b" + "SP" + r"EC\b",
    r"\bthe " + "se" + r"ed's\b",
    r"\b" + "se" + r"ed items?\b",
]
PATTERN = re.compile(
    "|".join([r"\b(?i:" + name + r")\b" for name in ORIGINS] + OUTSIDE),
)


def text_files() -> list[Path]:
    """Return the files git tracks or would track (untracked, not ignored) that are text."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    found = []
    for name in filter(None, listed):
        path = ROOT / name.decode()
        if not path.is_file():
            continue  # deleted in the work tree
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        found.append(path)
    return found


def offences(path: Path) -> list[str]:
    """Return `path:line: word` for each line of `path` that names an origin or outside document."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    rel = path.relative_to(ROOT)
    return [
        f"{rel}:{number}: {match.group(0)!r}"
        for number, line in enumerate(text.splitlines(), start=1)
        for match in [PATTERN.search(line)]
        if match
    ]


def test_the_pattern_catches_what_it_should_and_spares_random_seeds() -> None:
    caught = [
        "as " + "Job" + "bers' roles",
        "the " + "se" + "ed's defaults",
        "see " + "sha" + "red/NOTES.md",
        "(" + "SP" + "EC section 2)",
        "HOR" + "SIES style",
    ]
    spared = ["random.seed(7)", "a seed of 42", "job_spec(job)", "SPECS = {}", "the spec's [key]"]
    assert all(PATTERN.search(line) for line in caught)
    assert not any(PATTERN.search(line) for line in spared)


def test_no_file_names_an_origin_system_or_an_outside_document() -> None:
    files = text_files()
    assert len(files) > 100  # the listing worked
    found = [line for path in files for line in offences(path)]
    assert not found, "say what the thing does instead:\n" + "\n".join(found)
