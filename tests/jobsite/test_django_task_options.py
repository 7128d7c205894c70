"""The engine's options on django.tasks functions: `@task(...)`, `.using(...)` and the
backend's OPTIONS["TASK_OPTIONS"] (JobsiteTask, the backend's task_class)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from engine import Client, EngineSettings, JobNotFound
from jobsite.jobs.tasks.backend import JobsiteBackend, engine_ref
from jobsite.jobs.tasks.djtasks import InvalidTask, TaskResultStatus, task_backends
from jobsite.jobs.tasks.taskclass import JobsiteTask

from . import dj_tasks
from .conftest import run_worker

pytestmark = pytest.mark.django_db(transaction=True)


def engine_job(settings: EngineSettings, job_id: str) -> Any:
    async def go() -> Any:
        async with Client(settings) as client:
            return await client.jobs.get(job_id)

    return async_to_sync(go)()


def test_task_takes_engine_options_and_keeps_djangos(engine: EngineSettings) -> None:
    assert JobsiteBackend.task_class is JobsiteTask
    assert isinstance(dj_tasks.sleepy, JobsiteTask)
    assert dj_tasks.sleepy.engine_options() == {"max_retries": 0, "timeout_s": 0.2}
    moved = dj_tasks.sleepy.using(priority=5, timeout_s=3)
    assert (moved.priority, moved.timeout_s, moved.max_retries) == (5, 3, 0)
    assert dj_tasks.sleepy.timeout_s == 0.2  # frozen: using() made a copy
    with pytest.raises(TypeError, match="unknown task options: nope"):
        dj_tasks.sleepy.using(nope=1)
    with pytest.raises(InvalidTask, match="rate_limit must look like"):
        dj_tasks.report.using(rate_limit="often")
    with pytest.raises(InvalidTask, match="needs a ttl"):
        dj_tasks.report.using(deduplication={"id": "x", "mode": "throttle"})


def test_a_timeout_from_task_is_enforced_and_using_overrides_it(engine: EngineSettings) -> None:
    timed_out = dj_tasks.sleepy.enqueue(2)
    roomy = dj_tasks.sleepy.using(timeout_s=5).enqueue(0.3)
    async_to_sync(run_worker)(engine)
    failed = dj_tasks.sleepy.get_result(timed_out.id)
    assert failed.status == TaskResultStatus.FAILED
    assert "Timeout" in failed.errors[-1].traceback
    done = dj_tasks.sleepy.get_result(roomy.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == "woke"
    assert engine_job(engine, roomy.id).options["timeout_s"] == 5


def test_deduplication_returns_the_holders_result(engine: EngineSettings) -> None:
    once = dj_tasks.add.using(deduplication={"id": "sum-1", "ttl_s": 60})
    first = once.enqueue(1, 2)
    again = once.enqueue(3, 4)
    assert again.id == first.id and again.args == [1, 2]
    async_to_sync(run_worker)(engine)
    assert dj_tasks.add.get_result(first.id).return_value == 3


def test_limits_and_version_reach_the_job(engine: EngineSettings) -> None:
    result = dj_tasks.report.using(concurrency_limit=3, ttl_s=60).enqueue(1)
    job = engine_job(engine, result.id)
    assert (job.concurrency_key, job.concurrency_limit, job.rate_interval_ms) == (
        "reports",
        3,
        20.0,
    )
    assert (job.version, job.ttl_ms) == (1, 60_000)
    async_to_sync(run_worker)(engine)
    assert dj_tasks.report.get_result(result.id).return_value == 1


def test_a_rate_key_and_drop_reach_the_job_and_a_dropped_enqueue_says_why(
    engine: EngineSettings,
) -> None:
    dropping = dj_tasks.report.using(rate_limit="1/m", rate_key="acct-1", on_rate_limit="drop")
    first = dropping.enqueue(1)
    job = engine_job(engine, first.id)
    assert (job.rate_key, job.on_rate_limit, job.rate_interval_ms) == ("acct-1", "drop", 60_000)
    dropped = dropping.enqueue(2)
    assert dropped.status == TaskResultStatus.FAILED
    assert "RateLimited: rate limited" in dropped.errors[-1].traceback
    assert engine_job(engine, dropped.id).state == "cancelled"
    with pytest.raises(InvalidTask, match="on_rate_limit must be one of"):
        dj_tasks.report.using(on_rate_limit="later")


def test_cleanup_on_reaches_the_job_and_drops_it(engine: EngineSettings) -> None:
    dropped = dj_tasks.add.using(cleanup_on={"completed": 0, "failed": 600}).enqueue(1, 2)
    assert json.loads(engine_job(engine, dropped.id).cleanup_ms) == {
        "completed": 0,
        "failed": 600_000,
    }
    listed = dj_tasks.add.using(cleanup_on=["completed"]).enqueue(2, 2)
    assert json.loads(engine_job(engine, listed.id).cleanup_ms) == {"completed": 0}
    kept = dj_tasks.add.enqueue(3, 3)
    assert engine_job(engine, kept.id).cleanup_ms is None
    async_to_sync(run_worker)(engine)
    for gone in (dropped.id, listed.id):  # completed: its hash went at once
        with pytest.raises(JobNotFound):
            engine_job(engine, gone)
    assert dj_tasks.add.get_result(kept.id).return_value == 6
    with pytest.raises(InvalidTask, match="not a final state"):
        dj_tasks.add.using(cleanup_on={"started": 5})
    with pytest.raises(InvalidTask, match="seconds >= 0"):
        dj_tasks.add.using(cleanup_on={"failed": -1})


def test_backend_task_options_are_every_tasks_defaults(engine: EngineSettings) -> None:
    backend = task_backends["default"]
    saved = backend.options
    backend.options = {**saved, "TASK_OPTIONS": {"max_retries": 9, "queue_timeout_s": 30}}
    try:
        job = engine_ref(dj_tasks.add).call(1, 2)
        assert job.options["max_retries"] == 9 and job.queue_timeout_ms == 30_000
        job = engine_ref(dj_tasks.sleepy).call(1)
        assert job.options["max_retries"] == 0  # the task's own wins
    finally:
        backend.options = saved


def test_django_tasks_take_callbacks_run_by_how_their_job_ends(engine: EngineSettings) -> None:
    from jobsite.jobs.models import JobRecord

    from .conftest import mirror_all

    callbacks = {"on_success": (dj_tasks.note_parent, {"why": "sum"})}
    summed = dj_tasks.add.using(**callbacks, on_failure=dj_tasks.note_parent).enqueue(1, 2)
    exploded = dj_tasks.explode.using(on_failure=(dj_tasks.note_parent, {"why": "boom"})).enqueue()
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    rows = JobRecord.objects.filter(task=dj_tasks.note_parent.module_path)
    ended = {(row.parents[0], engine_job(engine, row.id).state): row.id for row in rows}
    assert set(ended) == {
        (summed.id, "completed"),
        (summed.id, "cancelled"),
        (exploded.id, "completed"),
    }
    assert engine_job(engine, ended[(summed.id, "completed")]).result == f"sum:{summed.id}"
    assert engine_job(engine, ended[(exploded.id, "completed")]).result == f"boom:{exploded.id}"
