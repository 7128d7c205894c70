"""The tasks a worker may run: engine @task functions and @django.tasks.task functions.

Built from ENGINE["TASK_MODULES"] at start-up; a payload never decides what gets imported.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from django.db import close_old_connections
from django.tasks import Task as DjangoTask
from django.tasks.base import TaskContext, TaskResult, TaskResultStatus
from django.utils import timezone

from engine import JobContext, Task, collect_tasks, task

from .backends import django_tasks_in


def _context(dtask: DjangoTask, job: JobContext, args: Any, kwargs: Any) -> TaskContext:
    now = timezone.now()
    result = TaskResult(
        task=dtask,
        id=job.id,
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=list(args),
        kwargs=dict(kwargs),
        backend=dtask.backend,
        errors=[],
        worker_ids=[job.worker_id] * job.attempt,
    )
    return TaskContext(task_result=result)


def wrap(dtask: DjangoTask) -> Task:
    """Return an engine task that runs a django Task (with its context when it takes one)."""
    func = dtask.func
    name = dtask.module_path
    options = {"queue": dtask.queue_name, "priority": dtask.priority, "takes_context": True}
    if inspect.iscoroutinefunction(func):

        async def run_async(job: JobContext, *args: Any, **kwargs: Any) -> Any:
            lead = (_context(dtask, job, args, kwargs),) if dtask.takes_context else ()
            return await func(*lead, *args, **kwargs)

        return task(run_async, name=name, **options)  # type: ignore[no-any-return]

    def run_sync(job: JobContext, *args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        try:
            lead = (_context(dtask, job, args, kwargs),) if dtask.takes_context else ()
            return func(*lead, *args, **kwargs)
        finally:
            close_old_connections()

    return task(run_sync, name=name, **options)  # type: ignore[no-any-return]


def load_tasks(modules: list[str]) -> list[Task]:
    """Return the engine tasks of `modules`, django Tasks wrapped."""
    tasks: list[Task] = []
    for name in modules:
        tasks.extend(collect_tasks(importlib.import_module(name)))
    tasks.extend(wrap(dtask) for dtask in django_tasks_in(modules).values())
    return tasks
