"""The tasks a worker may run: engine @task functions and @django.tasks.task functions.

Built from JOBSITE["TASK_MODULES"] at start-up; a payload never decides what gets imported.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib
import inspect
import logging
import traceback
from typing import Any

from django.db import close_old_connections
from django.dispatch import Signal
from django.utils import timezone

from engine import JobContext, Task, collect_tasks, task
from jobsite.jobs import conf
from jobsite.jobs.tasks.backend import django_tasks_in, task_defaults
from jobsite.jobs.tasks.djtasks import AnyTask as DjangoTask
from jobsite.jobs.tasks.djtasks import (
    AnyTaskContext as TaskContext,
)
from jobsite.jobs.tasks.djtasks import (
    AnyTaskResult as TaskResult,
)
from jobsite.jobs.tasks.djtasks import (
    TaskError,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)
from jobsite.jobs.tasks.taskclass import engine_options_of

# The worker id of a job run inline by eager mode (jobsite.jobs.tasks.eager).
EAGER_WORKER_ID = "eager"

log = logging.getLogger("jobsite.registry")


def _started(dtask: DjangoTask, job: JobContext, args: Any, kwargs: Any) -> TaskResult:
    """Return the running TaskResult of this attempt (what a context-taking task gets)."""
    now = timezone.now()
    return TaskResult(
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


def _finished(result: TaskResult, exc: BaseException | None = None, value: Any = None) -> None:
    """Mark the attempt's TaskResult finished, with its return value or its error."""
    object.__setattr__(result, "finished_at", timezone.now())
    if exc is None:
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
        return
    object.__setattr__(result, "status", TaskResultStatus.FAILED)
    kind = type(exc)
    result.errors.append(
        TaskError(
            exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
            traceback="".join(traceback.format_exception(exc)),
        )
    )


def _logged(signal_name: str, responses: list[tuple[Any, Any]]) -> None:
    """Log receivers that raised: a receiver never fails the job."""
    for receiver, response in responses:
        if isinstance(response, Exception):
            log.error(
                "task signal receiver failed signal=%s receiver=%r error=%r",
                signal_name,
                receiver,
                response,
            )


def _send(signal: Signal, name: str, result: TaskResult) -> None:
    sender = type(task_backends[result.backend])
    _logged(name, signal.send_robust(sender, task_result=result))


async def _asend(signal: Signal, name: str, result: TaskResult) -> None:
    sender = type(task_backends[result.backend])
    _logged(name, await signal.asend_robust(sender, task_result=result))


def _signature(dtask: DjangoTask) -> inspect.Signature:
    """Return the wrapper's signature: the job context, then the django function's arguments."""
    sig = inspect.signature(dtask.func)
    params = list(sig.parameters.values())
    if dtask.takes_context:
        params = params[1:]
    lead = inspect.Parameter("job", inspect.Parameter.POSITIONAL_ONLY)
    return sig.replace(parameters=[lead, *params])


# (django-stubs declares TaskContext not frozen; Django's is frozen.)
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class JobTaskContext(TaskContext):  # type: ignore[misc]
    """The context a django.tasks function with `takes_context=True` gets: Django's own
    (`task_result`, `attempt`), with the engine's job behind it, so the task can drive the
    dashboard's progress bar and job log, save its place for a later attempt, keep its lease
    alive and see a cancel.

    Sync functions call `set_progress`, `log`, `checkpoint` and `heartbeat`; async ones await
    `aset_progress`, `alog`, `acheckpoint` and `aheartbeat`; both read `checkpointed`. `job` is
    the engine's JobContext itself.
    """

    job: JobContext

    @property
    def cancelled(self) -> bool:
        """Tell whether the job was cancelled (check between steps, then return early)."""
        return self.job.cancelled

    def set_progress(self, pct: float, message: str = "") -> None:
        """Store progress (0 to 100) and a message on the job."""
        self.job.set_progress_sync(pct, message)

    def log(self, message: str) -> None:
        """Append a timestamped line to the job's log."""
        self.job.log_sync(message)

    def heartbeat(self) -> None:
        """Record a heartbeat (for tasks with max_heartbeat_interval_s)."""
        self.job.touch()

    @property
    def checkpointed(self) -> Any:
        """Return the state last saved with `checkpoint` (None on a first run)."""
        return self.job.checkpointed

    def checkpoint(self, state: Any) -> None:
        """Save `state` (JSON, within CHECKPOINT_MAX_BYTES) for a later attempt to resume from;
        None deletes it."""
        self.job.checkpoint_sync(state)

    async def aset_progress(self, pct: float, message: str = "") -> None:
        """Async twin of `set_progress`."""
        await self.job.set_progress(pct, message)

    async def alog(self, message: str) -> None:
        """Async twin of `log`."""
        await self.job.log(message)

    async def aheartbeat(self) -> None:
        """Async twin of `heartbeat`."""
        await self.job.heartbeat()

    async def acheckpoint(self, state: Any) -> None:
        """Async twin of `checkpoint`."""
        await self.job.checkpoint(state)


def _call(dtask: DjangoTask, job: JobContext, result: TaskResult, args: Any, kwargs: Any) -> Any:
    lead = (JobTaskContext(task_result=result, job=job),) if dtask.takes_context else ()
    return dtask.func(*lead, *args, **kwargs)


def _run_sync(dtask: DjangoTask, job: JobContext, args: Any, kwargs: Any) -> Any:
    """Run one attempt of a sync django Task, between its started and finished signals."""
    result = _started(dtask, job, args, kwargs)
    _send(task_started, "task_started", result)
    try:
        value = normalize_json(_call(dtask, job, result, args, kwargs))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        _finished(result, exc)
        _send(task_finished, "task_finished", result)
        raise
    _finished(result, value=value)
    _send(task_finished, "task_finished", result)
    return value


async def _run_async(dtask: DjangoTask, job: JobContext, args: Any, kwargs: Any) -> Any:
    """Async twin of `_run_sync`."""
    result = _started(dtask, job, args, kwargs)
    await _asend(task_started, "task_started", result)
    try:
        value = normalize_json(await _call(dtask, job, result, args, kwargs))
    except (asyncio.CancelledError, KeyboardInterrupt):
        raise  # stopped, not finished
    except BaseException as exc:
        _finished(result, exc)
        await _asend(task_finished, "task_finished", result)
        raise
    _finished(result, value=value)
    await _asend(task_finished, "task_finished", result)
    return value


def wrap(dtask: DjangoTask) -> Task:
    """Return an engine task that runs a django Task, sending Django's started/finished signals.

    The return value must be JSON as Django defines it (a datetime is not): otherwise the
    attempt fails with the TypeError, as with Django's own backends.
    """
    options = {
        "queue": dtask.queue_name,
        "priority": dtask.priority,
        **engine_options_of(dtask, task_defaults(dtask.backend)),
        "takes_context": True,
    }
    if inspect.iscoroutinefunction(dtask.func):

        async def run_async(job: JobContext, *args: Any, **kwargs: Any) -> Any:
            return await _run_async(dtask, job, args, kwargs)

        run = run_async
    else:

        def run_sync(job: JobContext, *args: Any, **kwargs: Any) -> Any:
            # A worker thread drops stale connections; eager mode runs in the caller's own.
            on_worker = job.worker_id != EAGER_WORKER_ID
            if on_worker:
                close_old_connections()
            try:
                return _run_sync(dtask, job, args, kwargs)
            finally:
                if on_worker:
                    close_old_connections()

        run = run_sync
    run.__signature__ = _signature(dtask)  # type: ignore[attr-defined]
    run.__wrapped__ = dtask.func  # type: ignore[attr-defined]  # its type hints
    return task(run, name=dtask.module_path, **options)


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
    """Return every task of JOBSITE["TASK_MODULES"] by name (loaded once per module list)."""
    return _known(tuple(conf.task_modules()))
