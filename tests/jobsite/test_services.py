"""Enqueue from Django code: the outbox, rollback, the crash window, reconciliation, runworker."""

from __future__ import annotations

import pytest
import redis
from asgiref.sync import async_to_sync
from django.core.management import call_command, get_commands
from django.db import transaction

from engine import Client, EngineSettings, JobNotFound, JobState
from jobsite.jobs import services
from jobsite.jobs.models import LOST, JobRecord, OutboxEntry
from jobsite.jobs.reconcile import reconcile
from tests.engine import tasks as t

pytestmark = pytest.mark.django_db(transaction=True)


def in_redis(engine: EngineSettings, job_id: str) -> JobState | None:
    async def get() -> JobState | None:
        async with Client(engine) as client:
            try:
                return (await client.get(job_id)).state
            except JobNotFound:
                return None

    return async_to_sync(get)()


def test_runworker_is_ours() -> None:
    assert get_commands()["runworker"] == "jobsite.jobs"


def test_enqueue_outside_a_transaction_goes_straight_to_redis(engine: EngineSettings) -> None:
    job = services.enqueue(t.add, 1, 2)
    assert in_redis(engine, job.id) is JobState.SUBMITTED
    assert not OutboxEntry.objects.exists()


def test_enqueue_in_a_transaction_waits_for_commit(engine: EngineSettings) -> None:
    with transaction.atomic():
        job = services.enqueue(t.add, 1, 2)
        assert in_redis(engine, job.id) is None
        assert OutboxEntry.objects.filter(job_id=job.id, pushed_at__isnull=True).exists()
    assert in_redis(engine, job.id) is JobState.SUBMITTED
    assert OutboxEntry.objects.get(job_id=job.id).pushed_at is not None


def test_rollback_enqueues_nothing(engine: EngineSettings) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        job = services.enqueue(t.add, 1, 2)
        raise RuntimeError("rolled back")
    assert in_redis(engine, job.id) is None
    assert not OutboxEntry.objects.exists()
    assert services.relay_once(older_than_s=0) == 0


def test_crash_between_commit_and_push_loses_nothing(
    engine: EngineSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services, "push_outbox", lambda *a, **k: 0)  # the process dies here
    with transaction.atomic():
        job = services.enqueue(t.add.using(delay_s=30), 1, 2)
    assert in_redis(engine, job.id) is None
    monkeypatch.undo()
    assert services.relay_once(older_than_s=0) == 1
    assert in_redis(engine, job.id) is JobState.SCHEDULED
    # pushing again (a relay racing a late on_commit) is harmless: the id is the idempotency key
    OutboxEntry.objects.update(pushed_at=None)
    assert services.relay_once(older_than_s=0) == 1
    assert in_redis(engine, job.id) is JobState.SCHEDULED


def test_reconcile_marks_lost_or_resubmits(engine: EngineSettings) -> None:
    common = {"queue": "default", "task": "add", "args": [1, 2], "kwargs": {}}
    JobRecord.objects.create(id="gone-1", state="started", **common)
    JobRecord.objects.create(id="gone-2", state="submitted", **common)
    JobRecord.objects.create(id="done-1", state="completed", **common)
    live = services.enqueue(t.add, 3, 4)
    JobRecord.objects.create(id=live.id, state="submitted", **common)
    assert reconcile("lost") == {"checked": 3, "lost": 2, "resubmitted": 0}
    assert set(JobRecord.objects.filter(state=LOST).values_list("id", flat=True)) == {
        "gone-1",
        "gone-2",
    }
    JobRecord.objects.filter(id="gone-2").update(state="submitted")
    assert reconcile("resubmit")["resubmitted"] == 1
    assert in_redis(engine, "gone-2") is JobState.SUBMITTED


def test_runworker_burst_runs_and_mirrors(engine: EngineSettings) -> None:
    jobs = [services.enqueue(t.add, i, 1) for i in range(10)]
    call_command("runworker", "--burst", "--only", "worker,mirror", "--concurrency", "4")
    assert JobRecord.objects.filter(id__in=[j.id for j in jobs], state="completed").count() == 10
    with redis.Redis.from_url(engine.redis_url) as r:
        assert r.zcard("jobsite:workers") == 0  # deregistered on exit


def test_runworker_stops_non_zero_when_a_loop_dies_of_a_bug(
    engine: EngineSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.core.management.base import CommandError
    from django.db import OperationalError

    from jobsite.jobs.mirror import Mirror

    calls: list[int] = []

    async def step(self: Mirror, block_ms: int = 1000) -> int:
        calls.append(block_ms)
        if len(calls) <= 2:  # a database that drops out is retried, not fatal
            raise OperationalError("database is locked")
        raise KeyError("a bug in the mirror")

    monkeypatch.setattr(Mirror, "step", step)
    with pytest.raises(CommandError, match="loop mirror crashed") as info:
        call_command("runworker", "--only", "mirror,relay")
    assert info.value.returncode == 70 and len(calls) == 3
