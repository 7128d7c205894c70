"""Django's documented django.tasks contract, kept by JobsiteBackend through a real worker.

Each test mirrors a behaviour of Django's own backends (django/tasks/backends/immediate.py,
tests/tasks in Django's repository): signals, enqueue at once, JSON rules, equal results,
validate_task, the async path, and the engine's options reachable from a django.tasks function.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.test import override_settings

from engine import Client, ConfigError, EngineSettings, PayloadTooLarge, Worker
from jobsite.jobs.tasks.backend import JobsiteBackend, _loop_safe
from jobsite.jobs.tasks.djtasks import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    log_task_enqueued,
    task_enqueued,
    task_finished,
    task_started,
)
from jobsite.jobs.tasks.registry import load_tasks

from . import dj_tasks
from .conftest import MODULES, run_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def signals() -> Iterator[list[tuple[str, Any, Any]]]:
    """Record (signal, sender, task_result as it was then) of the three django.tasks signals."""
    seen: list[tuple[str, Any, Any]] = []
    receivers = {}
    for name, signal in (
        ("enqueued", task_enqueued),
        ("started", task_started),
        ("finished", task_finished),
    ):

        def receive(sender: Any, task_result: Any, _name: str = name, **kw: Any) -> None:
            then = dataclasses.replace(task_result)  # a copy: the worker updates its result
            object.__setattr__(then, "_return_value", task_result._return_value)
            seen.append((_name, sender, then))

        receivers[name] = receive
        signal.connect(receive)
    yield seen
    task_enqueued.disconnect(receivers["enqueued"])
    task_started.disconnect(receivers["started"])
    task_finished.disconnect(receivers["finished"])


def submitted(engine: EngineSettings) -> int:
    async def count() -> int:
        async with Client(engine) as client:
            return (await client.queues.counts("default"))["submitted"]

    return async_to_sync(count)()


def test_the_three_signals_fire_with_djangos_arguments(
    engine: EngineSettings, signals: list[tuple[str, Any, Any]]
) -> None:
    ok = dj_tasks.add.enqueue(2, 3)
    bad = dj_tasks.fails_once.enqueue()
    assert [(n, s, r.id) for n, s, r in signals] == [
        ("enqueued", JobsiteBackend, ok.id),
        ("enqueued", JobsiteBackend, bad.id),
    ]
    async_to_sync(run_worker)(engine)
    by_id = {(n, r.id): (s, r) for n, s, r in signals}
    assert by_id[("started", ok.id)][1].status == TaskResultStatus.RUNNING
    sender, finished = by_id[("finished", ok.id)]
    assert sender is JobsiteBackend and finished.status == TaskResultStatus.SUCCESSFUL
    assert finished.return_value == 5
    failed = by_id[("finished", bad.id)][1]
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class_path == "builtins.RuntimeError"


def test_enqueued_goes_out_once_the_job_is_in_redis(
    engine: EngineSettings, signals: list[tuple[str, Any, Any]]
) -> None:
    # As Django's own backends send it: a receiver that reads the job back finds it, and a
    # push that failed sends nothing.
    found = []

    def read_back(sender: Any, task_result: Any, **kw: Any) -> None:
        found.append(dj_tasks.add.get_result(task_result.id).status)

    task_enqueued.connect(read_back)
    try:
        result = dj_tasks.add.enqueue(1, 2)
        with pytest.raises(PayloadTooLarge):
            dj_tasks.add.enqueue("x" * (engine.max_payload_bytes + 1), 1)
    finally:
        task_enqueued.disconnect(read_back)
    assert found == [TaskResultStatus.READY]
    assert [(n, r.id) for n, _, r in signals] == [("enqueued", result.id)]


def test_a_receiver_that_raises_never_fails_the_job(engine: EngineSettings) -> None:
    def broken(sender: Any, **kw: Any) -> None:
        raise RuntimeError("receiver bug")

    task_started.connect(broken)
    task_finished.connect(broken)
    try:
        result = dj_tasks.add.enqueue(1, 1)
        async_to_sync(run_worker)(engine)
    finally:
        task_started.disconnect(broken)
        task_finished.disconnect(broken)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 2


def test_enqueue_is_immediate_inside_a_transaction(engine: EngineSettings) -> None:
    with transaction.atomic():
        result = dj_tasks.add.enqueue(1, 2)
        assert dj_tasks.add.get_result(result.id).status == TaskResultStatus.READY
        assert submitted(engine) == 1  # in Redis already, as Django's backends do
    with pytest.raises(RuntimeError), transaction.atomic():
        dj_tasks.add.enqueue(3, 4)
        raise RuntimeError("rollback")
    assert submitted(engine) == 2  # a rollback does not take an enqueued task back


def test_the_outbox_option_defers_to_commit(engine: EngineSettings) -> None:
    with override_settings(
        TASKS={
            "default": {
                "BACKEND": "jobsite.jobs.tasks.backend.JobsiteBackend",
                "QUEUES": [],
                "OPTIONS": {"TRANSACTIONAL_OUTBOX": True},
            }
        }
    ):
        with transaction.atomic():
            kept = dj_tasks.add.enqueue(1, 2)
            assert dj_tasks.add.get_result(kept.id).status == TaskResultStatus.READY
            assert submitted(engine) == 0
        assert submitted(engine) == 1  # pushed on commit
        with pytest.raises(RuntimeError), transaction.atomic():
            dropped = dj_tasks.add.enqueue(3, 4)
            raise RuntimeError("rollback")
        assert submitted(engine) == 1
        with pytest.raises(TaskResultDoesNotExist):
            dj_tasks.add.get_result(dropped.id)


def test_arguments_and_return_values_follow_djangos_json_rules(engine: EngineSettings) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        dj_tasks.add.enqueue(datetime.now(), 1)
    assert submitted(engine) == 0  # refused before anything reached Redis
    result = dj_tasks.when.enqueue()
    async_to_sync(run_worker)(engine)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class_path == "builtins.TypeError"


def test_a_result_equals_what_get_result_reads_back(engine: EngineSettings) -> None:
    result = dj_tasks.add.enqueue(1, 2)
    assert dj_tasks.add.get_result(result.id) == result
    before = dataclasses.asdict(result)
    result.refresh()
    assert dataclasses.asdict(result) == before


def test_queue_names_are_validated_by_validate_task(engine: EngineSettings) -> None:
    with pytest.raises(InvalidTask, match="queue names"):
        dj_tasks.add.using(queue_name="no spaces")
    listed = {"BACKEND": "jobsite.jobs.tasks.backend.JobsiteBackend", "QUEUES": ["default"]}
    with override_settings(TASKS={"default": listed}):
        with pytest.raises(InvalidTask, match=r"^Queue 'unserved' is not valid for backend\.$"):
            dj_tasks.add.using(queue_name="unserved")
        task = dj_tasks.add.using(queue_name="default")
    # Django's check runs again at enqueue, under the backend of the moment.
    reports = {"default": {**listed, "QUEUES": ["reports"]}}
    with (
        override_settings(TASKS=reports),
        pytest.raises(InvalidTask, match=r"^Queue 'default' is not valid for backend\.$"),
    ):
        task.enqueue(1, 2)
    assert submitted(engine) == 0


def test_empty_queues_mean_any_queue_as_django_says(
    engine: EngineSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """The project's backend has `"QUEUES": []`: a queue outside JOBSITE["QUEUES"] is accepted,
    the job goes there (logged once per queue), and a worker started for it runs it."""
    elsewhere = dj_tasks.add.using(queue_name="elsewhere")  # JOBSITE["QUEUES"] is ["default"]
    with caplog.at_level(logging.WARNING, logger="jobsite.tasks"):
        first = elsewhere.enqueue(1, 2)
        second = async_to_sync(elsewhere.aenqueue)(3, 4)
    told = [r.getMessage() for r in caplog.records if "outside JOBSITE['QUEUES']" in r.getMessage()]
    assert len(told) == 1 and "queue=elsewhere" in told[0] and "--queues elsewhere" in told[0]
    assert submitted(engine) == 0  # not in "default"
    async_to_sync(run_worker)(engine)  # serves "default": nothing for it
    assert dj_tasks.add.get_result(first.id).status == TaskResultStatus.READY
    worker = Worker(engine, load_tasks(MODULES), queues=["elsewhere"], burst=True)
    async_to_sync(worker.run)()
    assert dj_tasks.add.get_result(first.id).return_value == 3
    assert dj_tasks.add.get_result(second.id).return_value == 7


def test_the_backends_any_queue_opens_no_other_door(engine: EngineSettings) -> None:
    """Only the backend's own jobs get its rule: every other way in still checks JOBSITE
    ["QUEUES"], and the backend's outbox rows keep the rule for the relay."""
    from jobsite.jobs import services
    from jobsite.jobs.models import OutboxEntry
    from jobsite.jobs.services import submission
    from tests.engine import tasks as t

    with pytest.raises(ConfigError, match="JOBSITE"):
        services.submit(t.add.using(queue="elsewhere").call(1, 2), outbox=False)
    with pytest.raises(ConfigError, match="JOBSITE"):
        services.enqueue(t.add.using(queue="elsewhere"), 1, 2)
    with pytest.raises(ConfigError, match="JOBSITE"):
        async_to_sync(services.aenqueue)(t.add.using(queue="elsewhere"), 1, 2)
    outbox = {
        "BACKEND": "jobsite.jobs.tasks.backend.JobsiteBackend",
        "QUEUES": [],
        "OPTIONS": {"TRANSACTIONAL_OUTBOX": True},
    }
    with override_settings(TASKS={"default": outbox}):
        with transaction.atomic():
            kept = dj_tasks.add.using(queue_name="elsewhere").enqueue(5, 6)
            row = OutboxEntry.objects.get(job_id=kept.id)
            assert row.job["queue_accepted_by"] == "TASKS['default']['QUEUES']"
        assert (
            services.run_engine(lambda c: c.jobs.get(kept.id)).queue == "elsewhere"
        )  # the relay pushed it at commit
    # An outbox row of another door names no rule: the relay checks JOBSITE["QUEUES"] for it.
    job = t.add.using(queue="elsewhere").call(1, 2)
    assert "queue_accepted_by" not in submission.outbox_payload(job)


def test_a_sync_get_result_in_async_code_reads_the_history_in_a_thread(
    engine: EngineSettings,
) -> None:
    async def missing() -> None:
        with pytest.raises(TaskResultDoesNotExist):
            dj_tasks.add.get_result("no-such-job")  # Redis, the outbox, then the history

    async_to_sync(missing)()


def test_the_backends_old_path_works_for_one_release_with_a_warning(
    engine: EngineSettings,
) -> None:
    from django.core.checks import run_checks

    from jobsite.jobs.checks import TAG
    from jobsite.jobs.tasks.djtasks import task_backends

    sys.modules.pop("jobsite.jobs.backends", None)
    old = {"default": {"BACKEND": "jobsite.jobs.backends.JobsiteBackend", "QUEUES": []}}
    with override_settings(TASKS=old):
        with pytest.warns(DeprecationWarning, match="jobsite.jobs.tasks.backend.JobsiteBackend"):
            backend = task_backends["default"]
        assert type(backend) is JobsiteBackend
        result = dj_tasks.add.enqueue(2, 2)
        assert [m.id for m in run_checks(tags=[TAG]) if m.id] == ["jobsite.W007"]
    assert submitted(engine) == 1 and dj_tasks.add.get_result(result.id).args == [2, 2]


def test_aenqueue_takes_the_async_path(
    engine: EngineSettings, signals: list[tuple[str, Any, Any]]
) -> None:
    result = async_to_sync(dj_tasks.async_double.aenqueue)(21)
    assert [n for n, *_ in signals] == ["enqueued"]
    async_to_sync(run_worker)(engine)
    assert async_to_sync(dj_tasks.async_double.aget_result)(result.id).return_value == 42


def test_aenqueue_runs_only_djangos_log_receiver_on_the_loop(
    engine: EngineSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """Django's own log line runs on the loop; any other receiver goes through asend."""
    called_on: list[int] = []

    def receive(sender: Any, task_result: Any, **kw: Any) -> None:
        called_on.append(threading.get_ident())

    async def areceive(sender: Any, task_result: Any, **kw: Any) -> None:
        called_on.append(-1)

    async def enqueue_both() -> tuple[str, int]:
        assert _loop_safe(task_enqueued, JobsiteBackend)
        # Django's logger is "django.tasks", the 5.2 backport's "django_tasks".
        logger = sys.modules[log_task_enqueued.__module__].logger.name
        with caplog.at_level(logging.DEBUG, logger=logger):
            first = await dj_tasks.async_double.aenqueue(1)
        task_enqueued.connect(receive)
        try:
            assert not _loop_safe(task_enqueued, JobsiteBackend)
            await dj_tasks.async_double.aenqueue(2)
        finally:
            task_enqueued.disconnect(receive)
        task_enqueued.connect(areceive)
        try:
            assert not _loop_safe(task_enqueued, JobsiteBackend)
            await dj_tasks.async_double.aenqueue(3)
        finally:
            task_enqueued.disconnect(areceive)
        return first.id, threading.get_ident()

    first_id, loop_thread = async_to_sync(enqueue_both)()
    [line] = [r for r in caplog.records if f"Task id={first_id} " in r.getMessage()]
    assert line.thread == loop_thread  # Django's log receiver ran on the loop: no hop
    assert called_on[0] != loop_thread  # a sync receiver of the project: in a thread
    assert called_on[1:] == [-1]
    assert submitted(engine) == 3


def test_engine_options_reach_a_django_task(engine: EngineSettings) -> None:
    twice = dj_tasks.fails_twice.enqueue()
    once = dj_tasks.fails_once.enqueue()
    async_to_sync(run_worker)(engine)
    assert len(dj_tasks.fails_twice.get_result(twice.id).errors) == 2  # max_retries=1
    assert len(dj_tasks.fails_once.get_result(once.id).errors) == 1  # max_retries=0
    from jobsite.jobs.tasks.engine_options import engine_options

    with pytest.raises(TypeError, match="@task"):
        engine_options(queue="x")


def test_worker_ids_has_one_entry_per_attempt(engine: EngineSettings) -> None:
    from .conftest import mirror_all

    result = dj_tasks.fails_twice.enqueue()
    worker = async_to_sync(run_worker)(engine)
    before_mirror = dj_tasks.fails_twice.get_result(result.id)
    async_to_sync(mirror_all)()
    got = dj_tasks.fails_twice.get_result(result.id)
    assert len(got.errors) == 2
    assert got.worker_ids == before_mirror.worker_ids == [worker.id, worker.id]


def test_job_signals_reach_django_receivers(engine: EngineSettings) -> None:
    from jobsite.jobs.tasks.signals import job_dead_lettered, job_finished, job_started

    seen: list[tuple[str, str, Any]] = []

    def started(sender: Any, job: Any, worker_id: str, **kw: Any) -> None:
        seen.append(("started", job.task, None))

    def finished(sender: Any, job: Any, outcome: str, **kw: Any) -> None:
        seen.append(("finished", job.task, outcome))

    def dead(sender: Any, job: Any, error: dict[str, Any], **kw: Any) -> None:
        seen.append(("dead", job.task, error["exception"]))
        raise RuntimeError("a receiver bug never fails the job")

    job_started.connect(started)
    job_finished.connect(finished)
    job_dead_lettered.connect(dead)
    try:
        ok = dj_tasks.add.enqueue(1, 2)
        dj_tasks.fails_once.enqueue()
        async_to_sync(run_worker)(engine)
    finally:
        job_started.disconnect(started)
        job_finished.disconnect(finished)
        job_dead_lettered.disconnect(dead)
    assert dj_tasks.add.get_result(ok.id).status == TaskResultStatus.SUCCESSFUL
    add, once = "tests.jobsite.dj_tasks.add", "tests.jobsite.dj_tasks.fails_once"
    assert sorted(seen) == sorted(
        [
            ("started", add, None),
            ("finished", add, "completed"),
            ("started", once, None),
            ("finished", once, "failed"),
            ("dead", once, "builtins.RuntimeError"),
        ]
    )
