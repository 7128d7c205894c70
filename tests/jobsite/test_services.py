"""Enqueue from Django code: the outbox, rollback, the crash window, reconciliation, runworker."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import redis
from asgiref.sync import async_to_sync
from django.core.management import call_command, get_commands
from django.db import transaction

from engine import Client, EngineSettings, JobNotFound, JobState
from jobsite.jobs import services
from jobsite.jobs.history.reconcile import reconcile
from jobsite.jobs.models import LOST, JobRecord, OutboxEntry
from jobsite.jobs.services import submission
from tests.engine import tasks as t

pytestmark = pytest.mark.django_db(transaction=True)


def in_redis(engine: EngineSettings, job_id: str) -> JobState | None:
    async def get() -> JobState | None:
        async with Client(engine) as client:
            try:
                return (await client.jobs.get(job_id)).state
            except JobNotFound:
                return None

    return async_to_sync(get)()


# The engine's client and its Redis plumbing; the rest of its public API is data (Job, errors).
ENGINE_INTERNALS = {"Client", "client", "connection", "keys"}
# The services wing is the one way in (services/engineloop.py holds its clients); the mirror
# reads the event stream with a connection of its own.
MAY_REACH_ENGINE = ("services/", "history/mirror.py")


def engine_internals_used(tree: ast.Module) -> list[str]:
    """Return the engine client and plumbing a module imports or reaches through `engine.`."""
    found: list[str] = []
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                parts = name.name.split(".")
                if parts[0] == "engine":
                    if len(parts) > 1 and parts[1] in ENGINE_INTERNALS:
                        found.append(name.name)
                    aliases.add(name.asname or "engine")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "engine":
                continue
            if len(parts) > 1 and parts[1] in ENGINE_INTERNALS:
                found.append(node.module)
            elif len(parts) == 1:
                found += [f"engine.{n.name}" for n in node.names if n.name in ENGINE_INTERNALS]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr in ENGINE_INTERNALS
        ):
            found.append(f"engine.{node.attr}")
    return found


def test_only_services_reaches_the_engine() -> None:
    app = Path(services.__file__).parent.parent
    offenders = {
        str(path.relative_to(app)): used
        for path in sorted(app.rglob("*.py"))
        if not str(path.relative_to(app)).startswith(MAY_REACH_ENGINE)
        and (used := engine_internals_used(ast.parse(path.read_text(), str(path))))
    }
    assert offenders == {}
    assert engine_internals_used(ast.parse("import engine.keys as k\nfrom engine import Client"))
    assert engine_internals_used(ast.parse("import engine as e\ne.client.Client()"))


def test_twins_share_one_client_within_a_session(engine: EngineSettings) -> None:
    async def which(client: Client) -> Client:
        return client

    async def go() -> tuple[Client, Client, Client]:
        async with services.session():
            first = await services.arun_engine(which)
            second = await services.arun_engine(which)
        return first, second, await services.arun_engine(which)

    first, second, alone = async_to_sync(go)()
    assert first is second and alone is not first
    assert services.acancel.__name__ == "acancel" and services.cancel.__name__ == "cancel"
    assert services.cancel.__doc__ == services.acancel.__doc__
    job = services.enqueue(t.add, 1, 2)
    assert services.run_engine(lambda c: c.jobs.get(job.id)).state is JobState.SUBMITTED
    with pytest.raises(JobNotFound):
        services.run_engine(lambda c: c.jobs.get("nobody"))


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


def test_an_engine_task_enqueues_itself_through_the_services(engine: EngineSettings) -> None:
    with transaction.atomic():  # task.delay() is services.enqueue(): the outbox, the checks
        job = t.add.delay(1, 2)
        assert in_redis(engine, job.id) is None
    assert in_redis(engine, job.id) is JobState.SUBMITTED
    assert OutboxEntry.objects.get(job_id=job.id).pushed_at is not None
    later = async_to_sync(t.add.using(delay_s=60).enqueue)(3, 4)
    assert in_redis(engine, later.id) is JobState.SCHEDULED


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
    monkeypatch.setattr(submission, "push_outbox", lambda *a, **k: 0)  # the process dies here
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
    # two rows a chunk: the walk goes on past a chunk with a missing job in it
    assert reconcile("lost", chunk=2) == {"checked": 3, "lost": 2, "resubmitted": 0}
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

    from jobsite.jobs.history.mirror import Mirror

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
