"""The one way into the engine: each operation as a sync function and its async twin.

The twin is `a`-prefixed (`cancel` / `acancel`), as Django names them. The API, the admin, the
dashboard's socket, the django.tasks backend and reconciliation reach Redis through these alone;
only the mirror (the event-stream reader) talks to the engine itself. Each operation is written
once, as an async function of a client (`twins`, services/engineloop.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from datetime import timedelta
from typing import Any, NamedTuple

from asgiref.sync import sync_to_async
from django.utils import timezone

from engine import (
    Client,
    F,
    Job,
    Metrics,
    OutageWatch,
    Reason,
    Recovery,
    Repeatable,
    ScheduleHealth,
    SyncReport,
    Task,
    explain,
    recent_outages,
    sample_dlq,
    schedule_health,
    server_info,
    server_ms,
    swap_state,
    sync_declared,
)
from engine import control as engine_control
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
from jobsite.jobs.services.submission import from_outbox, push_outbox
from jobsite.jobs.services.submission import run_eagerly_with as run_eagerly_with

log = logging.getLogger("jobsite.services")


async def _run_engine[T](client: Client, fn: Callable[[Client], Awaitable[T]]) -> T:
    """Run `fn(client)`: for an engine call that has no operation here (scripts, tests)."""
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


async def _get_job(client: Client, job_id: str, queue: str | None = None) -> Job:
    """Return a job from Redis (searched in every queue unless `queue`); JobNotFound if absent."""
    return await client.get(job_id, queue)


async def _dlq(
    client: Client,
    queue: str,
    offset: int = 0,
    limit: int = 100,
    task: str | None = None,
    version: int | None = None,
) -> list[Job]:
    """Return jobs in the dead-letter queue of `queue`, oldest first (of `task`, `version`)."""
    return await client.dlq(queue, offset, limit, task=task, version=version)


async def _scan_dlq(client: Client, queue: str, cursor: int, count: int) -> tuple[int, list[str]]:
    """Return the next ZSCAN cursor over `queue`'s dead-letter queue and the ids of one step
    (0: done; an id may come twice, as ZSCAN may return it)."""
    at, page = await client.redis.zscan(client.keys(queue).dlq, cursor, count=count)
    return int(at), [str(job_id) for job_id, _ in page]


async def _in_dlq(client: Client, queue: str, ids: list[str]) -> set[str]:
    """Return the ids among `ids` that the dead-letter queue of `queue` holds."""
    return await client.in_dlq(queue, ids)


async def _known_queues(client: Client) -> list[str]:
    """Return every queue jobs were ever submitted to, and every configured one (JOBSITE
    ["QUEUES"]: listed, paused or limited before its first job), sorted."""
    return sorted({*await client.queues(), *configured_queues()})


class QueueState(NamedTuple):
    """A queue's paused flag and its live counts per state."""

    name: str
    paused: bool
    counts: dict[str, int]


async def _queue_states(client: Client, names: Iterable[str] | None = None) -> list[QueueState]:
    """Return the state of the queues `names`, or of every known queue."""
    chosen = await _known_queues(client) if names is None else list(names)
    states = zip(chosen, await client.queue_states(chosen), strict=True)
    return [QueueState(q, paused, counts) for q, (paused, counts) in states]


async def _workers(client: Client) -> list[dict[str, Any]]:
    """Return the live workers: id, host, pid, queues, concurrency, current jobs, heartbeat."""
    return await client.workers()


async def _missing(client: Client, jobs: Iterable[tuple[str, str]]) -> set[str]:
    """Return the ids of the (job id, queue) pairs whose job Redis does not hold."""
    return await client.missing(jobs)


async def _scan_jobs(client: Client, queue: str, cursor: int, count: int) -> tuple[int, list[str]]:
    """Return the next SCAN cursor over `queue`'s job hashes and the ids of one step (0: done)."""
    return await client.scan_job_ids(queue, cursor, count)


async def _history_gaps(client: Client, queue: str) -> dict[str, int]:
    """Return the queue's history gaps, ever: event entries trimmed before the mirror read them,
    jobs of those rebuilt from their hashes, and jobs that could not be (trim-3.lua, mirror)."""
    return await client.history_gaps(queue)


async def _mark_missed(client: Client, queue: str, ids: list[str]) -> None:
    """Put jobs in `queue`'s missed SET: the mirror rebuilds their rows from their hashes."""
    await client.mark_missed(queue, ids)


async def _job_fields(
    client: Client, queue: str, ids: list[str], fields: Iterable[str]
) -> list[dict[str, Any]]:
    """Return `fields` of each job of `queue` Redis holds ({} for one it does not); JSON fields
    (parents) decoded."""
    out: list[dict[str, Any]] = await client.job_fields(queue, ids, list(fields))
    for found in out:
        if "parents" in found:
            found["parents"] = Job.from_hash({F.parents: found["parents"]}).parents
    return out


class QueueLimits(NamedTuple):
    """What the queue page sets and reads beside the counts."""

    paused: bool
    rate_interval_ms: float | None
    concurrency_keys: list[dict[str, Any]]


async def _queue_limits(client: Client, queue: str, keys_limit: int = 100) -> QueueLimits:
    """Return a queue's pause flag, rate limit and the concurrency keys with jobs waiting."""
    return QueueLimits(
        paused=await client.is_paused(queue),
        rate_interval_ms=await client.rate_limit_ms(queue),
        concurrency_keys=await client.concurrency_keys(queue, keys_limit),
    )


async def _set_rate_limit(client: Client, queue: str, rate: str | None) -> None:
    """Limit starts from `queue` for every worker ("10/s", "600/m"); None lifts the limit."""
    await client.set_rate_limit(queue, rate)


get_job, aget_job = twins(_get_job)


async def _explain_job(client: Client, job_id: str, queue: str | None = None) -> list[Reason]:
    """Return why a job has not started, in order (engine.ops.explain); [] once it started."""
    return await explain(client, job_id, queue)


explain_job, aexplain_job = twins(_explain_job)


async def _schedules_health(
    client: Client,
    queues: list[str],
    default_tolerance_s: float,
    recovery: Recovery | None = None,
) -> list[ScheduleHealth]:
    """Return each schedule's dead-man's-switch state (engine/periodic/schedule_health.py),
    excusing what the Redis outages of `recovery` explain."""
    return await schedule_health(client, queues, default_tolerance_s, recovery)


async def _health_look(client: Client, watch: OutageWatch, grace_ms: int) -> Recovery:
    """Record the Redis outage `watch` saw end; return the recent ones (periodic/outages.py)."""
    return await watch.look(client, grace_ms)


async def _health_recovery(client: Client, grace_ms: int) -> Recovery:
    """Return the recent Redis outages health excuses, recording none."""
    return await recent_outages(client, grace_ms)


async def _swap_health(client: Client, kind: str, name: str, state: str) -> str | None:
    """Record a schedule's or queue's health state; return the one recorded before."""
    return await swap_state(client, kind, name, state)


async def _dlq_sample(client: Client, queue: str, size: int, window_s: float, record: bool) -> int:
    """Return the queue's DLQ size at the start of the current window (`size` when none); with
    `record`, start a new window once this one is `window_s` old."""
    return await sample_dlq(client, queue, size, window_s, record)


schedules_health, aschedules_health = twins(_schedules_health)
health_look, ahealth_look = twins(_health_look)
health_recovery, ahealth_recovery = twins(_health_recovery)
swap_health, aswap_health = twins(_swap_health)
dlq_sample, adlq_sample = twins(_dlq_sample)
job_fields, ajob_fields = twins(_job_fields)
queue_limits, aqueue_limits = twins(_queue_limits)
set_rate_limit, aset_rate_limit = twins(_set_rate_limit)
dlq, adlq = twins(_dlq)
in_dlq, ain_dlq = twins(_in_dlq)
scan_dlq, ascan_dlq = twins(_scan_dlq)
known_queues, aknown_queues = twins(_known_queues)


async def _queue_names(client: Client) -> list[str]:
    """Return the names of the queues Redis knows."""
    return await client.queues()


queue_states, aqueue_states = twins(_queue_states)
queue_names, aqueue_names = twins(_queue_names)
workers, aworkers = twins(_workers)
missing, amissing = twins(_missing)
scan_jobs, ascan_jobs = twins(_scan_jobs)
mark_missed, amark_missed = twins(_mark_missed)
history_gaps, ahistory_gaps = twins(_history_gaps)


async def _declare_schedules(
    client: Client, reps: list[Repeatable], queues: Iterable[str]
) -> SyncReport:
    """Make Redis hold exactly the declared repeatables `reps` (engine.sync_declared)."""
    return await sync_declared(client.settings, client.redis, reps, queues=list(queues))


declare_schedules, adeclare_schedules = twins(_declare_schedules)


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
        result.update(await client.cancel(ids, queue=queue))
    return result


async def _resubmit(client: Client, jobs: Iterable[tuple[str, str]]) -> int:
    """Retry finished jobs (failed, stalled, expired, dropped, cancelled) as new attempt series."""
    return sum([await client.resubmit(q, ids) for q, ids in _by_queue(jobs).items()])


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
        return await client.resubmit(queue, ids)
    return await client.resubmit_dlq(queue, task=task)


async def _purge(client: Client, jobs: Iterable[tuple[str, str]]) -> int:
    """Delete finished jobs from Redis; return how many were deleted there."""
    return sum([await client.purge(q, ids) for q, ids in _by_queue(jobs).items()])


async def _set_paused(client: Client, queues: Iterable[str], paused: bool) -> int:
    """Pause or resume queues; return how many."""
    names = list(queues)
    for name in names:
        await (client.pause(name) if paused else client.resume(name))
    return len(names)


async def _run_now(client: Client, jobs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Run scheduled jobs (waiting for their run_at or a retry's backoff) now; return id ->
    "promoted", "not_found" or "not_scheduled"."""
    result: dict[str, str] = {}
    for queue, ids in _by_queue(jobs).items():
        result.update(await client.run_now(queue, ids))
    return result


async def _scheduled(
    client: Client, queue: str, offset: int, limit: int, retrying: bool | None
) -> list[Job]:
    """Return scheduled jobs of `queue`, next due first (only retries, or only the others)."""
    return await client.scheduled(queue, offset, limit, retrying=retrying)


async def _clear_state(client: Client, queue: str, state: str, dry_run: bool = False) -> int:
    """Delete `queue`'s finished jobs of `state` from Redis in batches (the history keeps its
    rows); return how many (with `dry_run`, how many there are)."""
    return await client.clear_state(queue, state, dry_run=dry_run)


async def _redis_info(client: Client) -> dict[str, Any]:
    """Return the engine's Redis memory, its limit and uptime (engine.server_info)."""
    return (await server_info(client.redis)).as_dict()


run_now, arun_now = twins(_run_now)
scheduled, ascheduled = twins(_scheduled)
clear_state, aclear_state = twins(_clear_state)
redis_info, aredis_info = twins(_redis_info)
cancel, acancel = twins(_cancel)
resubmit, aresubmit = twins(_resubmit)
clock_ms, aclock_ms = twins(_clock_ms)
resubmit_dlq, aresubmit_dlq = twins(_resubmit_dlq)
purge, apurge = twins(_purge)
set_paused, aset_paused = twins(_set_paused)


async def _control(client: Client, what: str, workers: Sequence[Mapping[str, Any]]) -> list[str]:
    """Give workers (registry entries, engine/ops/control.py's select) an order: quiet, resume or
    stop; return the ids told."""
    return await engine_control.send(
        client.redis, client.settings.prefix, engine_control.order(what), workers
    )


control, acontrol = twins(_control)


async def _drain_begin(client: Client, queue: str, by: str) -> dict[str, str] | None:
    """Mark a drain of `queue` running (engine/ops/drain.py); None when one already runs."""
    return await engine_drain.begin(client, queue, by)


async def _drain_run(client: Client, queue: str) -> int:
    """Drain `queue` as begun; return how many jobs were cancelled."""
    return await engine_drain.run(client, queue)


async def _drain_status(client: Client, queue: str) -> dict[str, str]:
    """Return the queue's last drain record ({}: never drained)."""
    return await engine_drain.status(client, queue)


drain_begin, adrain_begin = twins(_drain_begin)
drain_run, adrain_run = twins(_drain_run)
drain_status, adrain_status = twins(_drain_status)


def drain_in_background(queue: str) -> Future[int]:
    """Run a begun drain of `queue` on the engine loop, not waiting for it; return its future."""
    return engineloop.engine_loop().submit(
        engine_settings(), lambda client: engine_drain.run(client, queue)
    )


async def _metrics_snapshot(client: Client, names: Iterable[str] | None = None) -> Metrics:
    """Return the engine's metrics of queues `names` (default: JOBSITE["QUEUES"])."""
    return await client.metrics(list(configured_queues() if names is None else names))


metrics_snapshot, ametrics_snapshot = twins(_metrics_snapshot)
