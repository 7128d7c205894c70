"""Fetch Django's own tests/tasks for the installed Django, run them, print the counts."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import django

from tests.django_suite import fetch, run


def main() -> int:
    tests_dir = fetch.django_tests(django.get_version())
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run(
            [sys.executable, "-m", "tests.django_suite.run", str(tests_dir), str(report)],
            cwd=fetch.ROOT,
            check=False,
        )
        found = json.loads(report.read_text()) if report.exists() else None
    if found is None:
        return done.returncode or 1
    print(run.summary(found))
    for test_id, text in found["failed"].items():
        print(f"FAILED {test_id}\n{text}")
    return 1 if found["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
