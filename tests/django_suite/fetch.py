"""Django's `tests/tasks` of a Django version, from its source distribution on PyPI.

The sdist is downloaded once (`pip download`) into `.cache/django-sdist/`; only `tests/tasks` is
extracted from it, next to the archive.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "django-sdist"


class NoTaskTests(LookupError):
    """The Django version's sdist has no tests/tasks (Django 5.2: no django.tasks yet)."""


def django_tests(version: str, cache: Path = CACHE) -> Path:
    """Return the `tests` folder (holding `tasks/`) of Django `version`, fetched on first use."""
    done = cache / f"django-{version}" / "tests"
    if (done / "tasks").is_dir():
        return done
    cache.mkdir(parents=True, exist_ok=True)
    sdist = _sdist(version, cache)
    part = cache / f".django-{version}.{os.getpid()}.part"
    shutil.rmtree(part, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        # Members are "django-6.1.3/tests/tasks/...": the path below the archive's folder.
        wanted = [
            m for m in tar.getmembers() if m.name.partition("/")[2].startswith("tests/tasks/")
        ]
        if not wanted:
            raise NoTaskTests(f"{sdist.name} has no tests/tasks")
        tar.extractall(part, members=wanted, filter="data")
    (top,) = part.iterdir()  # the archive's one folder (django-6.1.3)
    target = done.parent
    if not (target / "tests" / "tasks").is_dir():
        shutil.rmtree(target, ignore_errors=True)
        top.rename(target)
    shutil.rmtree(part, ignore_errors=True)
    return done


def _sdist(version: str, cache: Path) -> Path:
    """Return the sdist archive of Django `version` in `cache`, downloading it when missing."""
    found = _archive(version, cache)
    if found is not None:
        return found
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-binary",
            ":all:",
            "--no-deps",
            "--disable-pip-version-check",
            "--quiet",
            f"django=={version}",
            "--dest",
            str(cache),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    found = _archive(version, cache)
    if found is None:
        raise FileNotFoundError(f"pip download of django=={version} left no sdist in {cache}")
    return found


def _archive(version: str, cache: Path) -> Path | None:
    """Return the sdist of Django `version` already in `cache` (its name's case varies)."""
    for found in cache.glob("*.tar.gz"):
        if found.name.lower() == f"django-{version}.tar.gz":
            return found
    return None
