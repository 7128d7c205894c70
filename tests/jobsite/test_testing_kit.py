"""The test kit users get (jobsite.testing): eager mode, enqueued-job assertions, run_jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from engine.dev.devserver import free_port
from jobsite.jobs import conf, services
from jobsite.jobs.tasks.djtasks import TaskResultStatus, task_finished
from jobsite.testing import assert_enqueued, enqueued_jobs, run_jobs, run_schedules_until
from tests.engine import tasks as t

from . import dj_tasks
from .conftest import MODULES

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def modules() -> Any:
    with override_settings(JOBSITE={**settings.JOBSITE, "TASK_MODULES": MODULES}):
        yield


def test_eager_mode_runs_each_job_at_enqueue_without_redis(jobsite_eager: None) -> None:
    nowhere = {
        **settings.JOBSITE,
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "TASK_MODULES": MODULES,
    }
    finished: list[Any] = []

    def record(sender: Any, task_result: Any, **kw: Any) -> None:
        finished.append(task_result.status)

    task_finished.connect(record)
    try:
        with override_settings(JOBSITE=nowhere):
            conf.engine_settings.cache_clear()
            ok = dj_tasks.add.enqueue(2, 3)
            bad = dj_tasks.explode.enqueue()
            engine_job = services.enqueue(t.add, 1, 2)
    finally:
        task_finished.disconnect(record)
        conf.engine_settings.cache_clear()
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 5
    assert bad.status == TaskResultStatus.FAILED
    assert bad.errors[0].exception_class_path == "builtins.ValueError"
    assert engine_job.state == "completed" and engine_job.result == 3
    assert finished == [TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED]


def test_assert_enqueued_and_run_jobs_against_a_real_redis(
    jobsite_redis: Any, modules: None
) -> None:
    dj_tasks.add.enqueue(1, 2)
    services.enqueue(t.add, 5, 5)
    assert [j.task for j in enqueued_jobs()] == ["tests.jobsite.dj_tasks.add", "add"]
    assert assert_enqueued(dj_tasks.add, 1, 2).args == [1, 2]
    assert_enqueued(t.add, 5, 5)
    with pytest.raises(AssertionError, match=r"waiting calls of it: \['tests.jobsite"):
        assert_enqueued(dj_tasks.add, 9, 9)
    counts = run_jobs()
    assert counts["completed"] == 2
    assert enqueued_jobs() == []


def test_the_kits_fixtures_check_argument_types(jobsite_eager: None) -> None:
    from engine import ArgumentTypeError

    with override_settings(JOBSITE={**settings.JOBSITE, "TASK_MODULES": MODULES}):
        # A test catches the call production would send with a string for an int.
        with pytest.raises(ArgumentTypeError, match="argument 'b'"):
            dj_tasks.add.enqueue(1, "2")
        with pytest.raises(ArgumentTypeError, match="argument 'a'"):
            services.enqueue(t.add, "1", 2)
        assert services.enqueue(t.add, 1, 2).result == 3


def test_the_kits_redis_fixture_turns_the_engines_own_check_on(jobsite_redis: Any) -> None:
    """One switch: the fixture's JOBSITE["CHECK_ARGUMENT_TYPES"] is the engine's setting, so a
    plain engine client built from the app's settings checks too."""
    from engine import ArgumentTypeError, SyncClient

    engine = conf.engine_settings()
    assert engine.check_argument_types is True
    with SyncClient(engine) as sync, pytest.raises(ArgumentTypeError, match="argument 'b'"):
        sync.enqueue(t.add, 1, "2")
    assert enqueued_jobs() == []


def test_run_schedules_until_fires_each_tick_of_the_days_ahead(jobsite_redis: Any) -> None:
    nightly = {"name": "nightly", "task": "add", "cron": "0 3 * * *", "args": [1, 2]}
    now = datetime.now(UTC)
    when = now + timedelta(days=3)
    three_am = now.replace(hour=3, minute=0, second=0, microsecond=0)
    due = [three_am + timedelta(days=d) for d in range(5)]
    expected = [d for d in due if now < d <= when]
    with override_settings(
        JOBSITE={**settings.JOBSITE, "TASK_MODULES": MODULES, "SCHEDULES": [nightly]}
    ):
        assert run_schedules_until(when) == len(expected) == 3
        waiting = enqueued_jobs()
        assert sorted(int(j.id.split("@")[1]) for j in waiting) == [
            int(d.timestamp() * 1000) for d in expected
        ]
        assert run_jobs()["completed"] == 3
        assert run_schedules_until(when) == 0  # each tick once


def test_run_jobs_until_runs_what_is_due_by_then_and_leaves_the_rest(
    jobsite_redis: Any, modules: None
) -> None:
    now = datetime.now(UTC)
    tomorrow = services.enqueue(t.add.using(delay_s=86_400), 1, 1)
    next_week = services.enqueue(t.add.using(delay_s=7 * 86_400), 2, 2)
    # Retried twice, each retry scheduled a little later: brought forward as it comes.
    retried = services.enqueue(t.retry_twice.using(delay_s=3_600))
    assert run_jobs(until=now).get("completed", 0) == 0  # nothing is due yet
    counts = run_jobs(until=now + timedelta(days=2))
    assert counts["completed"] == 2 and counts["retried"] == 2, counts
    state = {
        i: services.run_engine(lambda c, i=i: c.jobs.get(i)).state
        for i in (tomorrow.id, next_week.id, retried.id)
    }
    assert state == {tomorrow.id: "completed", next_week.id: "scheduled", retried.id: "completed"}
    assert [j.id for j in enqueued_jobs()] == [next_week.id]
