"""A test kit for projects that use Jobsite.

Unit tests, no Redis: `JOBSITE["EAGER"] = True` (or the `jobsite_eager` fixture) runs each
job inline when it is enqueued, as Django's ImmediateBackend does.

Integration tests, a real Redis: `enqueued_jobs(queue)` lists what waits, `assert_enqueued(task,
*args, **kwargs)` checks a call was enqueued, `run_jobs()` drains the queues with an in-process
burst worker, `run_schedules_until(when)` fires every schedule's ticks due by then. The pytest
fixtures come with `pytest_plugins = ["jobsite.testing"]` in a conftest.py: `jobsite_eager`, and
`jobsite_redis` (a private redis-server on a free port, settings.JOBSITE pointed at it, flushed
for each test).
"""

from __future__ import annotations

import importlib.util
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


def run_jobs(queues: list[str] | None = None, concurrency: int = 10) -> dict[str, int]:
    """Run every waiting job (and what they enqueue) in this process; return the counts."""
    settings = conf.engine_settings()
    names = queues or conf.queues()

    async def drain() -> dict[str, int]:
        worker = Worker(
            settings,
            load_tasks(conf.task_modules()),
            queues=names,
            concurrency=concurrency,
            burst=True,
            hooks=WORKER_HOOKS,
        )
        await worker.run()
        return dict(worker.counters)

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
