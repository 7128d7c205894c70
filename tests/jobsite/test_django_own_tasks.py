"""Django's own tests/tasks pass against JobsiteBackend: taken from the sdist of the installed
Django (fetched once into .cache/django-sdist/), run in a process of their own
(tests/django_suite). On Django 5.2 there are none to run: see the skip."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import django
import pytest

from tests.django_suite import fetch, run

# Fewest tests that must pass, per Django version (6.0.10: 66 of 71, 6.1.3: 71 of 76; the rest
# are run.NOT_THIS_BACKEND): a module that stopped loading fails here instead of passing empty.
AT_LEAST = {(6, 0): 66, (6, 1): 71}

pytestmark = pytest.mark.skipif(
    django.VERSION < (6, 0),
    reason="Django 5.2 has no django.tasks, so no tests/tasks; the django-tasks backport's "
    "sdist on PyPI ships its package only, without its tests (they live in its repository)",
)


def test_djangos_own_task_tests_pass_against_jobsite_backend(tmp_path: Path) -> None:
    try:
        tests_dir = fetch.django_tests(django.get_version())
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"pip download of Django's sdist failed: {exc.stderr.decode()[-2000:]}")
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.django_suite.run", str(tests_dir), str(report)],
        cwd=fetch.ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.exists(), done.stderr[-4000:]
    found = json.loads(report.read_text())
    print(run.summary(found))
    assert found["failed"] == {}, "\n".join([run.summary(found), *found["failed"].values()])
    # Every test left out is named, with its reason, and exists in this Django.
    assert set(found["skipped"]) == set(run.NOT_THIS_BACKEND)
    assert len(found["passed"]) >= AT_LEAST.get(django.VERSION[:2], max(AT_LEAST.values()))
    assert done.returncode == 0
