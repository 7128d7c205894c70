"""The tasks a worker may run: engine @task functions and @django.tasks.task functions.

Built from ENGINE["TASK_MODULES"] at start-up; a payload never decides what gets imported.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any

from django.db import close_old_connections
from django.tasks import Task as DjangoTask
from django.tasks.base import TaskContext, TaskResult, TaskResultStatus
from django.utils import timezone

from engine import JobContext, Task, collect_tasks, task

from . import conf
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


def _signature(dtask: DjangoTask) -> inspect.Signature:
    """Return the wrapper's signature: the job context, then the django function's arguments."""
    sig = inspect.signature(dtask.func)
    params = list(sig.parameters.values())
    if dtask.takes_context:
        params = params[1:]
    lead = inspect.Parameter("job", inspect.Parameter.POSITIONAL_ONLY)
    return sig.replace(parameters=[lead, *params])


def wrap(dtask: DjangoTask) -> Task:
    """Return an engine task that runs a django Task (with its context when it takes one)."""
    func = dtask.func
    name = dtask.module_path
    options = {"queue": dtask.queue_name, "priority": dtask.priority, "takes_context": True}
    if inspect.iscoroutinefunction(func):

        async def run_async(job: JobContext, *args: Any, **kwargs: Any) -> Any:
            lead = (_context(dtask, job, args, kwargs),) if dtask.takes_context else ()
            return await func(*lead, *args, **kwargs)

        run_async.__signature__ = _signature(dtask)  # type: ignore[attr-defined]
        run_async.__wrapped__ = func  # type: ignore[attr-defined]  # its type hints
        return task(run_async, name=name, **options)  # type: ignore[no-any-return]

    def run_sync(job: JobContext, *args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        try:
            lead = (_context(dtask, job, args, kwargs),) if dtask.takes_context else ()
            return func(*lead, *args, **kwargs)
        finally:
            close_old_connections()

    run_sync.__signature__ = _signature(dtask)  # type: ignore[attr-defined]
    run_sync.__wrapped__ = func  # type: ignore[attr-defined]  # its type hints
    return task(run_sync, name=name, **options)  # type: ignore[no-any-return]


def load_tasks(modules: list[str]) -> list[Task]:
    """Return the engine tasks of `modules`, django Tasks wrapped."""
    tasks: list[Task] = []
    for name in modules:
        tasks.extend(collect_tasks(importlib.import_module(name)))
    tasks.extend(wrap(dtask) for dtask in django_tasks_in(modules).values())
    return tasks


@functools.cache
def _known(modules: tuple[str, ...]) -> dict[str, Task]:
    return {t.name: t for t in load_tasks(list(modules))}


def known_tasks() -> dict[str, Task]:
    """Return every task of ENGINE["TASK_MODULES"] by name (loaded once per module list)."""
    return _known(tuple(conf.task_modules()))
