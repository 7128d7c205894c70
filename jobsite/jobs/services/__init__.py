"""The one way into the engine: its bridge, and the operations where the app adds work.

`run_engine(lambda c: c.jobs.get(job_id))` (and `await arun_engine(...)`) runs a call of the
engine's client and its resources (`c.jobs`, `c.queues`, `c.dead_letters`, `c.workers`) on the
engine loop, or on the socket's session client: the bridge, for a call the app passes through
as it is. A named function here adds work of its own (the submission gate, the outbox, grouping
by queue, the configured queues) and comes as a sync function and its async twin, `a`-prefixed
(`cancel` / `acancel`), as Django names them. The API, the admin, the dashboard's socket, the
django.tasks backend and reconciliation reach Redis through these alone; only the mirror (the
event-stream reader) talks to the engine itself (`twins`, services/engineloop.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Future
from datetime import timedelta
from typing import Any, NamedTuple

from asgiref.sync import sync_to_async
from django.utils import timezone

from engine import Client, F, Job, Metrics, Task, server_ms
from engine import drain as engine_drain
from jobsite.jobs.conf import engine_settings
from jobsite.jobs.conf import queues as configured_queues
from jobsite.jobs.models import OutboxEntry
from jobsite.jobs.services import engineloop
from jobsite.jobs.services.engineloop import session as session  # the websocket consumer opens one
from jobsite.jobs.services.engineloop import twins
from jobsite.jobs.services.submission import Actor as Actor
from jobsite.jobs.services.submission import aadmit as aadmit
from jobsite.jobs.services.submission import admit as admit
from jobsite.jobs.services.submission import check_arguments_with as check_arguments_with
from jobsite.jobs.services.submission import from_outbox, push_outbox
from jobsite.jobs.services.submission import run_eagerly_with as run_eagerly_with

log = logging.getLogger("jobsite.services")


async def _run_engine[T](client: Client, fn: Callable[[Client], Awaitable[T]]) -> T:
    """Run `fn(client)`: the bridge, for a call of the client or its resources as it is."""
    return await fn(client)


run_engine, arun_engine = twins(_run_engine)


def ping(timeout_s: float = 1.0) -> None:
    """Raise RedisUnavailable unless the engine's Redis answers within `timeout_s`."""
    settings = dataclasses.replace(
        engine_settings(), client_timeout_s=timeout_s, connect_timeout_s=timeout_s
    )

    async def call(client: Client) -> None:
        await client.ping()

    engineloop.call(settings, call)


# Reading jobs, queues and workers.


async def _known_queues(client: Client) -> list[str]:
    """Return every queue jobs were ever submitted to, and every configured one (JOBSITE
    ["QUEUES"]: listed, paused or limited before its first job), sorted."""
    return sorted({*await client.queues.names(), *configured_queues()})


class QueueState(NamedTuple):
    """A queue's paused flag and its live counts per state."""

    name: str
    paused: bool
    counts: dict[str, int]


async def _queue_states(client: Client, names: Iterable[str] | None = None) -> list[QueueState]:
    """Return the state of the queues `names`, or of every known queue."""
    chosen = await _known_queues(client) if names is None else list(names)
    states = zip(chosen, await client.queues.states(chosen), strict=True)
    return [QueueState(q, paused, counts) for q, (paused, counts) in states]


async def _job_fields(
    client: Client, queue: str, ids: list[str], fields: Iterable[str]
) -> list[dict[str, Any]]:
    """Return `fields` of each job of `queue` Redis holds ({} for one it does not); JSON fields
    (parents) decoded."""
    out: list[dict[str, Any]] = await client.jobs.fields(queue, ids, list(fields))
    for found in out:
        if "parents" in found:
            found["parents"] = Job.from_hash({F.parents: found["parents"]}).parents
    return out


class QueueLimits(NamedTuple):
    """What the queue page sets and reads beside the counts."""

    paused: bool
    rate_interval_ms: float | None
    max_running: int | None
    concurrency_keys: list[dict[str, Any]]


async def _queue_limits(client: Client, queue: str, keys_limit: int = 100) -> QueueLimits:
    """Return a queue's pause flag, rate limit, cap on running jobs and the concurrency keys
    with jobs waiting."""
    return QueueLimits(
        paused=await client.queues.is_paused(queue),
        rate_interval_ms=await client.queues.rate_limit_ms(queue),
        max_running=await client.queues.max_running(queue),
        concurrency_keys=await client.queues.concurrency_keys(queue, keys_limit),
    )


job_fields, ajob_fields = twins(_job_fields)
queue_limits, aqueue_limits = twins(_queue_limits)
known_queues, aknown_queues = twins(_known_queues)


queue_states, aqueue_states = twins(_queue_states)


# Submitting jobs: every door goes through the gate (services/submission.py).


def submit(job: Job, outbox: bool, queue_accepted_by: str = "") -> Job:
    """Submit a prepared job: at once, or with `outbox` inside a transaction, after commit.

    `queue_accepted_by` names the caller's own queue rule that accepted the job's queue (the
    django.tasks backend's QUEUES; submission.admit).
    """
    return admit([job], outbox=outbox, queue_accepted_by=queue_accepted_by)[0]


async def asubmit(job: Job, queue_accepted_by: str = "") -> Job:
    """Async twin of `submit` (no transaction: it reaches Redis at once)."""
    return (await aadmit([job], queue_accepted_by=queue_accepted_by))[0]


def enqueue(task: Task, *args: Any, **kwargs: Any) -> Job:
    """Enqueue a call of `task`. Inside transaction.atomic() it reaches Redis after commit."""
    return submit(task.call(*args, **kwargs), outbox=True)


async def aenqueue(task: Task, *args: Any, **kwargs: Any) -> Job:
    """Async twin of `enqueue` (no transaction: it reaches Redis at once)."""
    return await asubmit(task.call(*args, **kwargs))


def push(jobs: list[Job]) -> None:
    """Push jobs admitted before (reconciliation): ids already in Redis count as submitted."""
    admit(jobs, again=True)


def outboxed(job_id: str) -> Job | None:
    """Return a job still waiting in the outbox (its transaction committed, not yet pushed)."""
    row = OutboxEntry.objects.filter(job_id=job_id, pushed_at__isnull=True).first()
    return None if row is None else from_outbox(row.job)


def relay_once(older_than_s: float = 2.0, keep_pushed_s: float = 86_400) -> int:
    """Push outbox rows whose on_commit push never happened (a crash); drop old pushed rows."""
    pushed = push_outbox(older_than_s=older_than_s)
    cutoff = timezone.now() - timedelta(seconds=keep_pushed_s)
    OutboxEntry.objects.filter(pushed_at__lt=cutoff).delete()
    if pushed:
        log.info("relay pushed=%d", pushed)
    return pushed


arelay_once = sync_to_async(relay_once, thread_sensitive=True)


# Acting on jobs and queues.


def _by_queue(jobs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for job_id, queue in jobs:
        out[queue].append(job_id)
    return out


async def _cancel(client: Client, jobs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Cancel (job id, queue) pairs; return id -> outcome (cancelled, cancelling, finished...)."""
    result: dict[str, str] = {}
    for queue, ids in _by_queue(jobs).items():
        result.update(await client.jobs.cancel(ids, queue=queue))
    return result


async def _resubmit(client: Client, jobs: Iterable[tuple[str, str]]) -> int:
    """Retry finished jobs (failed, stalled, expired, dropped, cancelled) as new attempt series."""
    return sum([await client.jobs.resubmit(q, ids) for q, ids in _by_queue(jobs).items()])


async def _clock_ms(client: Client, queues: Iterable[str]) -> int:
    """Return Redis' time in ms by the clock of each queue's scripts, the earliest (the time a
    resubmit made now stamps on its jobs is at or after it)."""
    return min(
        [await server_ms(client.redis, client.keys(q).meta) for q in queues]
        or [await server_ms(client.redis)]
    )


async def _resubmit_dlq(
    client: Client, queue: str, ids: list[str] | None = None, task: str | None = None
) -> int:
    """Resubmit jobs from the DLQ of `queue`: these ids, else every one of `task`, else all."""
    if ids is not None:
        return await client.jobs.resubmit(queue, ids)
    return await client.dead_letters.resubmit(queue, task=task)


async def _purge(client: Client, jobs: Iterable[tuple[str, str]]) -> int:
    """Delete finished jobs from Redis; return how many were deleted there."""
    return sum([await client.jobs.purge(q, ids) for q, ids in _by_queue(jobs).items()])


async def _set_paused(client: Client, queues: Iterable[str], paused: bool) -> int:
    """Pause or resume queues; return how many."""
    names = list(queues)
    for name in names:
        await (client.queues.pause(name) if paused else client.queues.resume(name))
    return len(names)


async def _run_now(client: Client, jobs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Run scheduled jobs (waiting for their run_at or a retry's backoff) now; return id ->
    "promoted", "not_found" or "not_scheduled"."""
    result: dict[str, str] = {}
    for queue, ids in _by_queue(jobs).items():
        result.update(await client.jobs.run_now(queue, ids))
    return result


run_now, arun_now = twins(_run_now)
cancel, acancel = twins(_cancel)
resubmit, aresubmit = twins(_resubmit)
clock_ms, aclock_ms = twins(_clock_ms)
resubmit_dlq, aresubmit_dlq = twins(_resubmit_dlq)
purge, apurge = twins(_purge)
set_paused, aset_paused = twins(_set_paused)


def drain_in_background(queue: str) -> Future[int]:
    """Run a begun drain of `queue` on the engine loop, not waiting for it; return its future."""
    return engineloop.engine_loop().submit(
        engine_settings(), lambda client: engine_drain.run(client, queue)
    )


async def _metrics_snapshot(client: Client, names: Iterable[str] | None = None) -> Metrics:
    """Return the engine's metrics of queues `names` (default: JOBSITE["QUEUES"])."""
    return await client.metrics(list(configured_queues() if names is None else names))


metrics_snapshot, ametrics_snapshot = twins(_metrics_snapshot)
