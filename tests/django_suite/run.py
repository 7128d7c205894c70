"""Run Django's own tests/tasks against JobsiteBackend, in this process, and write a report.

    python -m tests.django_suite.run <Django's tests folder> <report.json>

A private redis-server, the settings of tests/django_suite/settings.py, and JobsiteBackend's
stand-ins (standins.py) in the places of Django's DummyBackend and ImmediateBackend: Django's
test classes name those in `override_settings(TASKS=...)` and check `isinstance` against them.
Django's tests use SimpleTestCase, which refuses database queries: JobsiteBackend reads its
history there for a result Redis no longer holds, so the run lets them query the test database.
The tests in NOT_THIS_BACKEND check what only the backend they were written for does; they are
skipped, with the reason, and counted apart.
"""

from __future__ import annotations

import json
import os
import sys
import time
import unittest
from pathlib import Path
from typing import Any

# Django's test modules of the task API; test_custom_backend.py tests backends it defines itself.
MODULES = ["tasks.test_tasks", "tasks.test_dummy_backend", "tasks.test_immediate_backend"]

_NO_RESULTS = (
    "ImmediateBackend keeps no results (supports_get_result is False); JobsiteBackend reads "
    "them back from Redis"
)
_STORE_EDITED = (
    "it edits DummyBackend's in-memory store (results[0].status) and expects refresh() to see "
    "it; a Jobsite job changes state only through a worker (refresh after a real worker ran: "
    "tests/jobsite/test_django_tasks_contract.py)"
)
# Test id (module.Class.method) -> why it does not apply to JobsiteBackend.
NOT_THIS_BACKEND: dict[str, str] = {
    "tasks.test_immediate_backend.ImmediateBackendTestCase.test_cannot_get_result": _NO_RESULTS,
    "tasks.test_immediate_backend.ImmediateBackendTestCase.test_cannot_refresh_result": (
        _NO_RESULTS
    ),
    "tasks.test_immediate_backend.ImmediateBackendTestCase.test_cannot_pass_run_after": (
        "ImmediateBackend cannot defer (supports_defer is False); JobsiteBackend can"
    ),
    "tasks.test_dummy_backend.DummyBackendTestCase.test_refresh_result": _STORE_EDITED,
    "tasks.test_dummy_backend.DummyBackendTestCase.test_refresh_result_async": _STORE_EDITED,
}


class Recording(unittest.TextTestResult):
    """A test result that also keeps the ids of the tests that passed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.passed: list[str] = []
        self._failed_subtests: set[str] = set()

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        if test.id() not in self._failed_subtests:
            self.passed.append(test.id())

    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._failed_subtests.add(test.id())


def _skip_what_does_not_apply(suite: unittest.TestSuite) -> None:
    for test in _flatten(suite):
        reason = NOT_THIS_BACKEND.get(test.id())
        if reason is not None:
            method = getattr(type(test), test._testMethodName)
            setattr(type(test), test._testMethodName, unittest.skip(reason)(method))


def _flatten(suite: unittest.TestSuite) -> list[unittest.TestCase]:
    out: list[unittest.TestCase] = []
    for item in suite:
        out += _flatten(item) if isinstance(item, unittest.TestSuite) else [item]  # type: ignore[list-item]
    return out


def run(tests_dir: Path) -> dict[str, Any]:
    """Run Django's task tests from `tests_dir`; return the report."""
    import django
    from django.tasks.backends import dummy, immediate
    from django.test import SimpleTestCase
    from django.test.runner import DiscoverRunner

    from tests.django_suite import standins

    dummy.DummyBackend = standins.StoredBackend  # type: ignore[misc]
    immediate.ImmediateBackend = standins.RunNowBackend  # type: ignore[misc]
    SimpleTestCase.databases = {"default"}  # type: ignore[assignment]
    sys.path.insert(0, str(tests_dir))

    class Runner(DiscoverRunner):
        def get_resultclass(self) -> Any:
            return Recording

    runner = Runner(verbosity=0, interactive=False)
    runner.setup_test_environment()
    suite = unittest.defaultTestLoader.loadTestsFromNames(MODULES)
    _skip_what_does_not_apply(suite)
    old = runner.setup_databases()
    started = time.monotonic()
    try:
        result = runner.run_suite(suite)
    finally:
        runner.teardown_databases(old)
        runner.teardown_test_environment()
    failed = {t.id(): text for t, text in [*result.failures, *result.errors]}
    skipped = {t.id(): why for t, why in result.skipped}
    passed = sorted(set(result.passed) - set(failed))
    return {
        "django": django.get_version(),
        "modules": MODULES,
        "tests": len(passed) + len(failed) + len(skipped),
        "passed": passed,
        "failed": failed,
        "skipped": skipped,
        "seconds": round(time.monotonic() - started, 1),
    }


def summary(report: dict[str, Any]) -> str:
    """Return one line of a report's counts."""
    applicable = len(report["passed"]) + len(report["failed"])
    return (
        f"Django {report['django']}: {len(report['passed'])} of {applicable} of Django's own "
        f"tests/tasks pass against JobsiteBackend ({len(report['skipped'])} test what only "
        f"Django's own backends do; {report['seconds']} s)"
    )


def main(tests_dir: str, report: str) -> int:
    from engine.dev.devserver import RedisServer

    with RedisServer() as server:
        os.environ["JOBSITE_SUITE_REDIS_URL"] = server.url
        os.environ["DJANGO_SETTINGS_MODULE"] = "tests.django_suite.settings"
        import django

        django.setup()
        found = run(Path(tests_dir))
    Path(report).write_text(json.dumps(found, indent=2))
    return 0 if not found["failed"] else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
