"""JobsiteBackend in the places of Django's DummyBackend and ImmediateBackend, for Django's own
tests/tasks (tests/django_suite/run.py puts them there, so their `isinstance` checks hold).

Each is JobsiteBackend plus only what Django's tests read of the backend it stands in for:
- `StoredBackend`, for DummyBackend (keeps what is enqueued, runs nothing): no worker runs;
  `results` reads back from Redis each job it enqueued, `clear()` empties the private Redis.
- `RunNowBackend`, for ImmediateBackend (runs a task in the caller): the job is enqueued as
  usual, then a burst worker in this process runs it to its end, once (Django has no retries:
  its worker gets the tasks with `max_retries=0`), and the result is read back from Redis.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import redis
from asgiref.sync import async_to_sync

from engine import Worker
from jobsite.jobs import conf
from jobsite.jobs.tasks.backend import JobsiteBackend
from jobsite.jobs.tasks.registry import load_tasks
from jobsite.jobs.tasks.signals import WORKER_HOOKS


class StoredBackend(JobsiteBackend):
    """JobsiteBackend with no worker: Django's DummyBackend tests read `results`, `clear()`."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self._ids: list[str] = []

    @property
    def results(self) -> list[Any]:
        """Return the results of the jobs enqueued here, as Redis holds them now."""
        return [self.get_result(job_id) for job_id in self._ids]

    def clear(self) -> None:
        """Forget every job: the run's private Redis is emptied."""
        self._ids.clear()
        with redis.Redis.from_url(conf.engine_settings().redis_url) as r:
            r.flushdb()

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = super().enqueue(task, args, kwargs)
        self._ids.append(result.id)
        return result

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = await super().aenqueue(task, args, kwargs)
        self._ids.append(result.id)
        return result


class RunNowBackend(JobsiteBackend):
    """JobsiteBackend whose enqueue waits for a worker to run the job: Django's
    ImmediateBackend tests read the finished result."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = super().enqueue(task, args, kwargs)
        async_to_sync(run_worker)(task.queue_name)
        return self.get_result(result.id)

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = await super().aenqueue(task, args, kwargs)
        await run_worker(task.queue_name)
        return await self.aget_result(result.id)


async def run_worker(queue: str) -> None:
    """Run a burst worker over `queue` with JOBSITE["TASK_MODULES"], each task run once."""
    once = [
        dataclasses.replace(t, options=dataclasses.replace(t.options, max_retries=0))
        for t in load_tasks(conf.task_modules())
    ]
    worker = Worker(conf.engine_settings(), once, queues=[queue], burst=True, hooks=WORKER_HOOKS)
    await worker.run()
