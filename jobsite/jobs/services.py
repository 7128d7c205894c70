"""The only Django module that calls the engine: enqueue (with the outbox) and job actions."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any, TypeVar

from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction
from django.utils import timezone

from engine import Client, DuplicateJob, Job, Metrics, Task

from . import eager
from .conf import check_queue, engine_settings
from .conf import queues as configured_queues
from .models import OutboxEntry

log = logging.getLogger("jobsite.services")
T = TypeVar("T")


async def _with_client[T](fn: Callable[[Client], Awaitable[T]]) -> T:
    """Run `fn` with a client bound to the current event loop, then close it."""
    async with Client(engine_settings()) as client:
        return await fn(client)


def run_engine[T](fn: Callable[[Client], Awaitable[T]]) -> T:
    """Run an engine call from sync Django code."""
    return async_to_sync(_with_client)(fn)


def _outbox_payload(job: Job) -> dict[str, Any]:
    return {"job": job.to_dict(), "delay_ms": job.delay_ms}


def _from_outbox(payload: dict[str, Any]) -> Job:
    job = Job.from_dict(payload["job"])
    job.delay_ms = payload.get("delay_ms")
    return job


async def _submit(client: Client, jobs: list[Job]) -> None:
    """Submit jobs; ids that already reached Redis count as submitted (pushing is idempotent)."""
    try:
        await client.enqueue_many(jobs)
    except DuplicateJob:
        log.info("outbox push found jobs already submitted count=%d", len(jobs))


def enqueue(task: Task, *args: Any, **kwargs: Any) -> Job:
    """Enqueue a call of `task`. Inside transaction.atomic() it reaches Redis after commit."""
    return submit(task.call(*args, **kwargs), outbox=True)


def submit(job: Job, outbox: bool) -> Job:
    """Submit a prepared job: at once, or with `outbox` inside a transaction, after commit.

    With JOBSITE["EAGER"] on, it runs here and now instead (see jobsite.jobs.eager).
    """
    check_queue(job.queue)
    if eager.enabled():
        return eager.run_inline(job)
    if outbox and transaction.get_connection().in_atomic_block:
        OutboxEntry.objects.create(job_id=job.id, queue=job.queue, job=_outbox_payload(job))
        transaction.on_commit(lambda: push_outbox([job.id]), robust=True)
        return job
    run_engine(lambda client: _submit(client, [job]))
    return job


async def asubmit(job: Job) -> Job:
    """Async twin of `submit` (no transaction: it reaches Redis at once)."""
    check_queue(job.queue)
    if eager.enabled():
        return await sync_to_async(eager.run_inline)(job)
    await _with_client(lambda client: _submit(client, [job]))
    return job


async def aenqueue(task: Task, *args: Any, **kwargs: Any) -> Job:
    """Async twin of `enqueue` (no transaction: it reaches Redis at once)."""
    return await asubmit(task.call(*args, **kwargs))


def outboxed(job_id: str) -> Job | None:
    """Return a job still waiting in the outbox (its transaction committed, not yet pushed)."""
    row = OutboxEntry.objects.filter(job_id=job_id, pushed_at__isnull=True).first()
    return None if row is None else _from_outbox(row.job)


def push_outbox(job_ids: Iterable[str] | None = None, older_than_s: float = 0.0) -> int:
    """Push committed outbox rows that have not reached Redis; return how many were pushed."""
    rows = OutboxEntry.objects.filter(pushed_at__isnull=True)
    if job_ids is not None:
        rows = rows.filter(job_id__in=list(job_ids))
    if older_than_s:
        rows = rows.filter(created_at__lte=timezone.now() - timedelta(seconds=older_than_s))
    entries = list(rows.order_by("id")[:1000])
    if not entries:
        return 0
    jobs = [_from_outbox(e.job) for e in entries]
    run_engine(lambda client: _submit(client, jobs))
    OutboxEntry.objects.filter(id__in=[e.id for e in entries]).update(pushed_at=timezone.now())
    return len(entries)


def relay_once(older_than_s: float = 2.0, keep_pushed_s: float = 86_400) -> int:
    """Push outbox rows whose on_commit push never happened (a crash); drop old pushed rows."""
    pushed = push_outbox(older_than_s=older_than_s)
    cutoff = timezone.now() - timedelta(seconds=keep_pushed_s)
    OutboxEntry.objects.filter(pushed_at__lt=cutoff).delete()
    if pushed:
        log.info("relay pushed=%d", pushed)
    return pushed


arelay_once = sync_to_async(relay_once, thread_sensitive=True)


def _by_queue(jobs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for job_id, queue in jobs:
        out[queue].append(job_id)
    return out


def cancel(jobs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Cancel (job id, queue) pairs through the engine; return id -> outcome."""

    async def call(client: Client) -> dict[str, str]:
        result: dict[str, str] = {}
        for queue, ids in _by_queue(jobs).items():
            result.update(await client.cancel(ids, queue=queue))
        return result

    return run_engine(call)


def resubmit(jobs: Iterable[tuple[str, str]]) -> int:
    """Retry finished jobs (failed, stalled, expired, dropped, cancelled) as new attempt series."""

    async def call(client: Client) -> int:
        return sum([await client.resubmit(q, ids) for q, ids in _by_queue(jobs).items()])

    return run_engine(call)


def purge(jobs: Iterable[tuple[str, str]]) -> int:
    """Delete finished jobs from Redis; return how many were deleted there."""

    async def call(client: Client) -> int:
        return sum([await client.purge(q, ids) for q, ids in _by_queue(jobs).items()])

    return run_engine(call)


def set_paused(queues: Iterable[str], paused: bool) -> int:
    """Pause or resume queues through the engine; return how many."""
    names = list(queues)

    async def call(client: Client) -> int:
        for name in names:
            await (client.pause(name) if paused else client.resume(name))
        return len(names)

    return run_engine(call)


def metrics_snapshot(names: Iterable[str] | None = None) -> Metrics:
    """Return the engine's metrics of queues `names` (default: JOBSITE["QUEUES"])."""
    wanted = list(configured_queues() if names is None else names)
    return run_engine(lambda client: client.metrics(wanted))


async def ametrics_snapshot(names: Iterable[str] | None = None) -> Metrics:
    """Async twin of `metrics_snapshot`."""
    wanted = list(configured_queues() if names is None else names)
    return await _with_client(lambda client: client.metrics(wanted))
