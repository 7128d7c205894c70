"""Why a job has not started: the reasons a waiting job waits, in the order they apply.

`explain(client, job_id)` reads the job, its queue's settings and the worker registry (a few
reads, never a script, never on the hot path) and returns a `Reason` per obstacle:

1. `paused`: the queue is paused.
2. `rate_limited`: the queue's or the task's rate limit, or the budget of the job's rate key
   (the message names the key); `until_ms` is the next free slot.
3. `concurrency`: its concurrency key is at its limit; `jobs` are the ids holding it.
4. `parents`: parents that have not completed; `jobs` are their ids.
5. `scheduled`: its `run_at` is ahead; `until_ms` is when.
6. `no_worker`: no live worker serves its queue; or `no_version`: workers serve it, but none
   with the job's task@version (the claim set it aside, or no worker stamped that version in
   the queue's `served` HASH lately: engine/resources/versions.py).
7. `expired`: its deadline passed; the next claim or the cleaner ends it `expired`.

A started or finished job has no reasons. Each reason names what to change (`target`: the
queue, a job, the workers) so a surface can link to it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..fields import both, either
from ..job import Job, JobState
from ..keys import version_tag
from ..ops.handle import Handle
from ..transport.connection import server_ms
from .versions import ADVERTISE_S

# The states of a job that has not started yet.
WAITING_STATES = frozenset(
    {JobState.SCHEDULED, JobState.BLOCKED, JobState.SUBMITTED, JobState.UNSUBMITTED}
)
# A task@version stamped in `served` longer ago than this has no live worker (they stamp every
# ADVERTISE_S).
VERSION_STALE_MS = int(3 * ADVERTISE_S * 1000)
# The most job ids a reason lists (holders of a concurrency key, parents).
MAX_LISTED = 20


@dataclass(frozen=True, slots=True)
class Reason:
    """One obstacle: its code, a sentence, what to change, and when or who where it applies."""

    code: str
    message: str
    # What to change: "queue" (its page: pause, rate limit, concurrency), "job" (jobs' pages),
    # "workers" (start one for the queue).
    target: str
    until_ms: int | None = None
    jobs: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Return the reason as plain JSON-ready values."""
        return asdict(self)


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


async def explain(client: Handle, job_id: str, queue: str | None = None) -> list[Reason]:
    """Return why the job has not started, in order; [] for a started or finished job."""
    job = await client.jobs.get(job_id, queue)
    if job.state not in WAITING_STATES:
        return []
    keys = client.keys(job.queue)
    redis = client.redis
    now_ms = await server_ms(redis, keys.meta)  # the clock of the queue's scripts
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hmget(
            keys.meta, ["paused", "rate_interval_ms", "tat", f"tat:{job.task}", "max_running"]
        )
        pipe.hmget(keys.job(job.id), both("ckey_active", "ckey_waiting", "rate_slot_ms"))
        pipe.zcard(keys.started)
        if job.rate_key is not None:  # the key's own budget stands for the task's
            pipe.get(keys.rate(job.rate_key))
        meta, hidden, running, *key_tat = await pipe.execute()
    paused, queue_interval, tat, task_tat, most = meta
    ckey_active, ckey_waiting, rate_slot = either(hidden)
    own_tat = key_tat[0] if key_tat else task_tat
    slot = _rate_slot(job.state, rate_slot, queue_interval, job.rate_interval_ms, tat, own_tat)
    found = [
        Reason("paused", f"queue {job.queue!r} is paused", "queue") if paused == "1" else None,
        _rate_limited(slot, now_ms, job.rate_key),
        _full(job, most, int(running)),
        await _concurrency(client, job, ckey_active, ckey_waiting),
        await _parents(client, job),
        _scheduled(job, now_ms) if not rate_slot else None,
        await _workers(client, job, now_ms),
        _expired(job, now_ms),
    ]
    return [reason for reason in found if reason is not None]


def _full(job: Job, most: str | None, running: int) -> Reason | None:
    """Return why a ready job waits for its queue's cap on running jobs (max_running)."""
    if most is None or job.state != "submitted" or running < int(most):
        return None
    message = f"queue {job.queue!r} runs its most at once ({running} of max_running {most})"
    return Reason("queue_full", message, "queue")


def _rate_limited(slot: int | None, now_ms: int, rate_key: str | None) -> Reason | None:
    if slot is None or slot <= now_ms:
        return None
    limited = f"rate limited (rate key {rate_key!r})" if rate_key is not None else "rate limited"
    message = f"{limited}: the next free slot is at {_when(slot)}"
    return Reason("rate_limited", message, "queue", until_ms=slot)


async def _concurrency(
    client: Handle, job: Job, ckey_active: str | None, ckey_waiting: str | None
) -> Reason | None:
    """Return `concurrency` when the job waits in its concurrency key's waiting set."""
    redis = client.redis
    if not (ckey_active and ckey_waiting) or await redis.zscore(ckey_waiting, job.id) is None:
        return None
    holders: list[str] = sorted(await redis.smembers(ckey_active))  # type: ignore[arg-type]
    return Reason(
        "concurrency",
        f"concurrency key {job.concurrency_key!r} is at its limit of "
        f"{job.concurrency_limit}, held by {', '.join(holders[:MAX_LISTED]) or 'none'}",
        "job",
        jobs=holders[:MAX_LISTED],
    )


async def _parents(client: Handle, job: Job) -> Reason | None:
    """Return `parents` for a blocked job whose parents have not all completed."""
    if job.state != JobState.BLOCKED or not job.parents:
        return None
    keys = client.keys(job.queue)
    async with client.redis.pipeline(transaction=False) as pipe:
        for parent in job.parents:
            pipe.hmget(keys.job(parent), both("state"))
        states = [either(row)[0] for row in await pipe.execute()]
    pending = [p for p, s in zip(job.parents, states, strict=True) if s != "completed"]
    if not pending:
        return None
    message = f"waiting for parents to complete: {', '.join(pending[:MAX_LISTED])}"
    return Reason("parents", message, "job", jobs=pending[:MAX_LISTED])


def _scheduled(job: Job, now_ms: int) -> Reason | None:
    if job.state != JobState.SCHEDULED or job.run_at_ms is None or job.run_at_ms <= now_ms:
        return None
    message = f"scheduled to run at {_when(job.run_at_ms)}"
    return Reason("scheduled", message, "job", until_ms=job.run_at_ms, jobs=[job.id])


async def _workers(client: Handle, job: Job, now_ms: int) -> Reason | None:
    """Return `no_worker` when no live worker serves the queue, `no_version` when none of
    those runs the job's task@version."""
    if not any(
        job.queue in str(w.get("queues", "")).split(",") for w in await client.workers.list()
    ):
        return Reason("no_worker", f"no live worker serves queue {job.queue!r}", "workers")
    tag = version_tag(job.task, job.version)
    seen = await client.redis.hget(client.keys(job.queue).served, tag)
    aside = job.extra.get("unserved_at_ms")
    if not aside and seen and now_ms - int(seen) <= VERSION_STALE_MS:
        return None
    since = f" (set aside at {_when(int(aside))})" if aside else ""
    message = f"no live worker serving queue {job.queue!r} runs {tag}{since}"
    return Reason("no_version", message, "workers")


def _expired(job: Job, now_ms: int) -> Reason | None:
    if job.deadline_ms is None or job.deadline_ms > now_ms:
        return None
    message = f"its deadline passed at {_when(job.deadline_ms)}: it will end expired"
    return Reason("expired", message, "job", until_ms=job.deadline_ms, jobs=[job.id])


def _rate_slot(
    state: JobState,
    rate_slot: str | None,
    queue_interval: str | None,
    task_interval: float | None,
    tat: str | None,
    task_tat: str | None,
) -> int | None:
    """Return the next start slot a rate limit gives the job, or None when none applies."""
    if state == JobState.SCHEDULED and rate_slot:
        return int(float(rate_slot))
    if state != JobState.SUBMITTED or rate_slot:  # a job holding its slot is not limited again
        return None
    slots = []
    if queue_interval and tat:
        slots.append(float(tat))
    if task_interval and task_tat:
        slots.append(float(task_tat))
    return int(max(slots)) if slots else None
