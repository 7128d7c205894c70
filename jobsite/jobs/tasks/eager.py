"""Eager mode for unit tests (`JOBSITE["EAGER"] = True`): a job runs inline when it is enqueued.

As Celery's eager mode and Django's ImmediateBackend: no Redis, no worker. One attempt, no
retries, no scheduling (a delay is ignored); the outcome is on the returned job, the task's
exception is recorded, never raised to the caller. Django's signals fire as on a worker.
A job's callbacks follow it: the one its end calls for runs inline too, the other ends
`cancelled`.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from asgiref.sync import async_to_sync

from engine import ConfigError, Job, JobContext, JobState, error_info
from jobsite.jobs import conf
from jobsite.jobs.tasks.registry import EAGER_WORKER_ID as WORKER_ID
from jobsite.jobs.tasks.registry import known_tasks


def enabled() -> bool:
    """Tell whether JOBSITE["EAGER"] is on."""
    return bool(conf.option("EAGER"))


def run_inline(job: Job) -> Job:
    """Run `job` in this process now; return it finished (completed or failed)."""

    task = known_tasks().get(job.task)
    if task is None or task.fn is None:
        raise ConfigError(f"task {job.task!r} is not in JOBSITE['TASK_MODULES']")
    job.attempt = 1
    job.worker = WORKER_ID
    job.started_at_ms = job.submitted_at_ms = int(time.time() * 1000)
    lead: list[Any] = (
        [JobContext(job=job, worker_id=WORKER_ID)] if task.options.takes_context else []
    )
    try:
        call = async_to_sync(task.fn) if task.is_async else task.fn
        value = call(*lead, *job.args, **job.kwargs)
        orjson.dumps(value)  # what a worker stores must be JSON
    except Exception as exc:
        job.state = JobState.FAILED
        job.errors = [error_info(job, exc, type(exc).__name__, str(exc))]
    else:
        job.state = JobState.COMPLETED
        job.result = value
    job.completed_at_ms = int(time.time() * 1000)
    for callback in job.callbacks:
        wanted = JobState.FAILED if callback.runs_on == "failure" else JobState.COMPLETED
        if callback.runs_on == "end" or job.state is wanted:
            run_inline(callback)
        else:
            callback.state = JobState.CANCELLED
    return job
