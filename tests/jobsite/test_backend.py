"""The django.tasks backend through Django's own task API."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from engine import EngineSettings, InvalidArguments
from jobsite.jobs.tasks.djtasks import TaskResultDoesNotExist, TaskResultStatus, task_backends

from . import dj_tasks
from .conftest import run_worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_backend_features() -> None:
    backend = task_backends["default"]
    assert (
        backend.supports_defer,
        backend.supports_async_task,
        backend.supports_get_result,
        backend.supports_priority,
    ) == (True, True, True, True)


def test_enqueue_run_and_get_result(engine: EngineSettings) -> None:
    ok = dj_tasks.add.enqueue(2, 3)
    bad = dj_tasks.explode.enqueue()
    ctx = dj_tasks.which_attempt.enqueue()
    aio = dj_tasks.async_double.using(priority=50).enqueue(21)
    assert ok.status == TaskResultStatus.READY
    async_to_sync(run_worker)(engine)
    ok.refresh()
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 5
    assert ok.worker_ids and ok.started_at and ok.finished_at
    got = dj_tasks.add.get_result(ok.id)
    assert got.return_value == 5 and got.args == [2, 3]
    failed = dj_tasks.explode.get_result(bad.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class_path == "builtins.ValueError"
    assert "kaboom" in failed.errors[0].traceback
    assert dj_tasks.which_attempt.get_result(ctx.id).return_value == 1
    assert dj_tasks.async_double.get_result(aio.id).return_value == 42


def test_a_django_task_drives_progress_and_the_job_log(engine: EngineSettings) -> None:
    from jobsite.jobs import services

    sync = dj_tasks.import_rows.enqueue(3)
    aio = dj_tasks.aimport_rows.enqueue(2)
    async_to_sync(run_worker)(engine)
    for result, rows in ((sync, 3), (aio, 2)):
        assert result.task.get_result(result.id).return_value == rows
        job = services.run_engine(lambda c, result=result: c.jobs.get(result.id))
        assert (job.progress, job.progress_message) == (100.0, f"row {rows} of {rows}")
        assert [line["message"] for line in job.logs] == [
            f"imported row {n}" for n in range(1, rows + 1)
        ]


def test_defer_and_async_get_result(engine: EngineSettings) -> None:
    later = dj_tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    result = async_to_sync(dj_tasks.add.aget_result)(later.id)
    assert result.status == TaskResultStatus.READY


def test_bad_calls_and_unknown_ids(engine: EngineSettings) -> None:
    with pytest.raises(InvalidArguments):
        dj_tasks.add.enqueue(1, 2, 3)
    with pytest.raises(TaskResultDoesNotExist):
        dj_tasks.add.get_result("no-such-id")
