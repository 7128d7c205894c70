"""Reads of one job as steps (steps.py): one definition for the asyncio Client's `jobs` and the
SyncClient, each driving them on its own connection."""

from __future__ import annotations

import time

from ..errors import JobNotFound, JobTimeout
from ..job import TERMINAL_STATES, Job
from ..keys import queue_keys, queues_key
from .steps import Call, Pause, Pipe, Steps

# A wait's polls: the first pause, and the longest (each pause doubles up to it).
FIRST_PAUSE_S = 0.002
LONGEST_PAUSE_S = 0.1


def find_job(prefix: str, job_id: str, queue: str | None = None) -> Steps:
    """Return the job with this id, from every known queue at once when `queue` is None; an
    unknown id raises JobNotFound (never "pending")."""
    names: list[str]
    if queue:
        names = [queue]
    else:
        known: set[str] = yield Call("smembers", (queues_key(prefix),))
        names = sorted(known)
    found: list[dict[str, str]] = yield Pipe(
        [("hgetall", (queue_keys(prefix, name).job(job_id),), {}) for name in names]
    )
    for name, fields in zip(names, found, strict=True):
        if fields:
            return Job.from_hash(fields, job_id, name)
    raise JobNotFound(f"no job with id {job_id!r}")


def wait_for_end(prefix: str, job_id: str, timeout_s: float, queue: str | None = None) -> Steps:
    """Return the job once it reached a terminal state; raise JobTimeout after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    pause_s = FIRST_PAUSE_S
    while True:
        job: Job = yield from find_job(prefix, job_id, queue)
        queue = job.queue
        if job.state in TERMINAL_STATES:
            return job
        left = deadline - time.monotonic()
        if left <= 0:
            raise JobTimeout(f"job {job_id} still {job.state} after {timeout_s}s")
        yield Pause(min(pause_s, left))
        pause_s = min(pause_s * 2, LONGEST_PAUSE_S)
