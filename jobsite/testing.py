"""A test kit for projects that use Jobsite.

Unit tests, no Redis: `JOBSITE["EAGER"] = True` (or the `jobsite_eager` fixture) runs each
job inline when it is enqueued, as Django's ImmediateBackend does.

Integration tests, a real Redis: `enqueued_jobs(queue)` lists what waits, `assert_enqueued(task,
*args, **kwargs)` checks a call was enqueued, `run_jobs()` drains the queues with an in-process
burst worker (`run_jobs(until=when)`: and the jobs scheduled by `when`, as if the time had
come), `run_schedules_until(when)` fires every schedule's ticks due by then. The pytest
fixtures come with `pytest_plugins = ["jobsite.testing"]` in a conftest.py: `jobsite_eager`, and
`jobsite_redis` (a private redis-server on a free port, settings.JOBSITE pointed at it, flushed
for each test).
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync

from engine import Client, Job, Scheduler, Task, Worker
from jobsite.jobs import conf, services
from jobsite.jobs.tasks import djtasks
from jobsite.jobs.tasks.djtasks import AnyTask as DjangoTask
from jobsite.jobs.tasks.registry import load_tasks
from jobsite.jobs.tasks.signals import WORKER_HOOKS


def _name(task: Task | DjangoTask) -> str:
    return task.module_path if isinstance(task, djtasks.Task) else task.name


def enqueued_jobs(queue: str = "default") -> list[Job]:
    """Return the jobs of `queue` that have not started: next to run first, then scheduled."""

    async def read(client: Client) -> list[Job]:
        return await client.queues.waiting(queue)

    return services.run_engine(read)


def assert_enqueued(task: Task | DjangoTask, *args: Any, **kwargs: Any) -> Job:
    """Assert one waiting job calls `task` with these arguments; return it."""
    name = _name(task)
    queue = task.queue_name if isinstance(task, djtasks.Task) else task.options.queue
    jobs = enqueued_jobs(queue)
    for job in jobs:
        if job.task == name and job.args == list(args) and job.kwargs == kwargs:
            return job
    calls = [f"{j.task}(*{j.args}, **{j.kwargs})" for j in jobs if j.task == name]
    raise AssertionError(
        f"no waiting call {name}(*{list(args)}, **{kwargs}) on queue {queue!r}; "
        f"waiting calls of it: {calls or 'none'}"
    )


def run_jobs(
    queues: list[str] | None = None, concurrency: int = 10, until: datetime | None = None
) -> dict[str, int]:
    """Run every waiting job, and what those jobs enqueue, with an in-process burst worker;
    return the worker's counters (completed, failed, retried...).

    With `until`, the test's clock is `until`: jobs scheduled by then (a delay, a run_at, a
    retry's backoff) run now, soonest first, and so do those they schedule by then, as if the
    time had come; a job due later stays scheduled."""
    settings = conf.engine_settings()
    names = queues or conf.queues()
    until_ms = None if until is None else int(until.timestamp() * 1000)

    async def promote(client: Client) -> int:
        promoted = 0
        for queue in names:
            ids = await client.queues.due_by(queue, until_ms or 0, limit=100_000)
            outcome = await client.jobs.run_now(queue, ids) if ids else {}
            promoted += sum(1 for v in outcome.values() if v == "promoted")
        return promoted

    async def drain() -> dict[str, int]:
        counters: Counter[str] = Counter()
        while True:
            worker = Worker(
                settings,
                load_tasks(conf.task_modules()),
                queues=names,
                concurrency=concurrency,
                burst=True,
                burst_scheduled=until_ms is None,
                hooks=WORKER_HOOKS,
            )
            await worker.run()
            counters.update(worker.counters)
            if until_ms is None or not await services.arun_engine(promote):
                return dict(counters)

    if until_ms is not None:
        services.run_engine(promote)
    return async_to_sync(drain)()


def run_schedules_until(when: datetime, queues: list[str] | None = None) -> int:
    """Enqueue every tick of the schedules (JOBSITE["SCHEDULES"] and those added at run time)
    due by `when`, each at its own time, as a scheduler running all along would; return the
    ticks fired. The schedules' clock is the test's: `when` may be days ahead. `run_jobs()`
    then runs what they enqueued."""
    from jobsite.jobs.tasks import schedules

    names = queues or conf.queues()
    async_to_sync(schedules.sync)(schedules.declared(), names)

    async def fire(client: Client) -> int:
        scheduler = Scheduler(client.settings, client.redis, names)
        return await scheduler.fire_until(int(when.timestamp() * 1000))

    return services.run_engine(fire)


# The pytest fixtures, where pytest is installed (Django's own test runner needs none of them).
if importlib.util.find_spec("pytest") is not None:
    from jobsite.testing_fixtures import (  # noqa: F401 - pytest finds them here
        _jobsite_redis_server,
        jobsite_eager,
        jobsite_redis,
    )
