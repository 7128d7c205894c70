"""A django.tasks backend that runs @django.tasks.task functions on the engine."""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, cast

from django.db import connections, transaction
from django.dispatch import Signal

from engine import (
    PER_CALL_OPTIONS,
    ConfigError,
    InvalidArguments,
    JobNotFound,
    JobState,
    Task,
    bind_or_raise,
    task_ref,
    validate_queue_name,
)
from engine import Job as EngineJob
from jobsite.jobs import services
from jobsite.jobs.conf import check_queue, task_modules
from jobsite.jobs.models import JobRecord
from jobsite.jobs.tasks import djtasks
from jobsite.jobs.tasks.djtasks import AnyTask as DjangoTask
from jobsite.jobs.tasks.djtasks import (
    AnyTaskResult as TaskResult,
)
from jobsite.jobs.tasks.djtasks import (
    BaseTaskBackend,
    InvalidTask,
    TaskError,
    TaskResultDoesNotExist,
    TaskResultStatus,
    log_task_enqueued,
    task_backends,
    task_enqueued,
)
from jobsite.jobs.tasks.taskclass import JobsiteTask, engine_options_of

STATUS = {
    JobState.UNSUBMITTED: TaskResultStatus.READY,  # waiting in the outbox for its commit
    JobState.SCHEDULED: TaskResultStatus.READY,
    JobState.BLOCKED: TaskResultStatus.READY,
    JobState.SUBMITTED: TaskResultStatus.READY,
    JobState.STARTED: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
}


def django_tasks_in(module_names: list[str]) -> dict[str, DjangoTask]:
    """Return the django.tasks Task objects defined in the configured modules, by module path."""
    found: dict[str, DjangoTask] = {}
    for name in module_names:
        for value in vars(importlib.import_module(name)).values():
            if isinstance(value, djtasks.Task):
                found[value.module_path] = value
    return found


def engine_ref(task: DjangoTask) -> Task:
    """Return the engine task a django Task is enqueued as (its module path is the name).

    Options that may change per call go through `using()`, so they travel with the job (the
    worker applies them); the rest are the task's declaration, as on the worker.
    """
    options = engine_options_of(task, task_defaults(task.backend))
    options.update(queue=task.queue_name, priority=task.priority)
    per_call = {
        k: options.pop(k)
        for k in list(options)
        if k in PER_CALL_OPTIONS and not (k == "backoff" and callable(options[k]))
    }
    ref = task_ref(task.module_path, **options)
    return ref.using(run_at=task.run_after, **per_call) if per_call or task.run_after else ref


def task_defaults(alias: str) -> dict[str, Any]:
    """Return the engine options every task of a backend gets (OPTIONS["TASK_OPTIONS"])."""
    backend = task_backends[alias]
    return dict(backend.options.get("TASK_OPTIONS", {})) if backend.options else {}


# How many django Tasks a backend keeps the checked engine task of (a `using()` call makes a new
# Task object each time: the oldest go first).
REFS_KEPT = 256


# Receivers known to be safe on an event loop: Django's own log line (a logger call).
LOOP_SAFE_RECEIVERS = frozenset({log_task_enqueued})


def _loop_safe(signal: Signal, sender: type) -> bool:
    """Tell whether every live receiver of `signal` for `sender` may run on the event loop.

    `asend` runs sync receivers in a thread (one may use the ORM), and that hop took as long
    as the whole push to Redis; Django's own log receiver needs none. (`_live_receivers` is
    Signal's, Django 5.0 and later: the sync receivers, then the async ones.)
    """
    sync, not_sync = signal._live_receivers(sender)
    return not not_sync and all(receiver in LOOP_SAFE_RECEIVERS for receiver in sync)


log = logging.getLogger("jobsite.tasks")


def _dt(ms: int | None) -> datetime | None:
    return None if not ms else datetime.fromtimestamp(ms / 1000, tz=UTC)


class JobsiteBackend(BaseTaskBackend):
    """`TASKS = {"default": {"BACKEND": "jobsite.jobs.tasks.backend.JobsiteBackend"}}`.

    Enqueue reaches Redis at once, as Django's contract says; with
    `"OPTIONS": {"TRANSACTIONAL_OUTBOX": True}` a call inside `transaction.atomic()` is kept in
    the outbox and pushed after commit (never after a rollback), and `get_result` answers READY
    for it meanwhile.

    The backend's `QUEUES` decide which queues its tasks may use, as Django defines them (`[]`:
    any queue); the submission gate is told so (`queue_accepted_by`) instead of checking
    JOBSITE["QUEUES"], which still guards every other way in. A job sent to a queue outside
    JOBSITE["QUEUES"] is logged once per queue: no worker serves it unless one is started for it.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True
    # @task(...) and .using(...) take the engine's options too (Django's extension point).
    task_class = JobsiteTask

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self._tasks: dict[str, DjangoTask] | None = None
        self.outbox = bool(self.options.get("TRANSACTIONAL_OUTBOX", False))
        # The engine task of each django Task checked lately, by identity (a Task is frozen):
        # building one costs more than the rest of an enqueue but Redis' round trip.
        self._refs: dict[int, tuple[DjangoTask, Task]] = {}
        self._refs_lock = threading.Lock()
        self._warned: set[str] = set()  # tasks enqueued before a commit, told once
        # Queues sent to so far: one outside JOBSITE["QUEUES"] is told once (_note_queue).
        self._queues_seen: set[str] = set()
        # The rule that accepted this backend's queues, for the submission gate.
        self.queue_rule = f"TASKS[{alias!r}]['QUEUES']"

    @property
    def tasks(self) -> dict[str, DjangoTask]:
        """Return the known django Tasks (from JOBSITE["TASK_MODULES"] and those enqueued here)."""
        if self._tasks is None:
            self._tasks = django_tasks_in(task_modules())
        return self._tasks

    def validate_task(self, task: DjangoTask) -> None:
        """Django's checks (the backend's QUEUES among them), then the engine's: a queue name
        it accepts, and the engine options."""
        super().validate_task(task)
        self._engine_task(task)

    def _checked_ref(self, task: DjangoTask) -> Task:
        """Validate `task` (see validate_task) the first time; return the engine task it is
        enqueued as. An enqueue does not check again a Task checked before: it is frozen, and
        so are its backend's QUEUES and options."""
        known = self._refs.get(id(task))
        if known is not None and known[0] is task:
            return known[1]
        super().validate_task(task)
        return self._engine_task(task)

    def _engine_task(self, task: DjangoTask) -> Task:
        """Return the engine task `task` is enqueued as, built and checked once."""
        known = self._refs.get(id(task))
        if known is not None and known[0] is task:
            return known[1]
        try:
            validate_queue_name(task.queue_name)
            ref = engine_ref(task)  # the engine's options, checked here
        except ConfigError as exc:
            raise InvalidTask(str(exc)) from None
        with self._refs_lock:
            self._refs[id(task)] = (task, ref)
            while len(self._refs) > REFS_KEPT:
                del self._refs[next(iter(self._refs))]
        return ref

    def _prepare(self, task: DjangoTask, args: Any, kwargs: Any) -> tuple[EngineJob, TaskResult]:
        """Check the call and build its job and result; nothing reaches Redis yet."""
        ref = self._checked_ref(task)
        lead = (None,) if task.takes_context else ()
        try:
            bind_or_raise(task.func, (*lead, *args), kwargs)
        except TypeError as exc:
            raise InvalidArguments(f"task {task.module_path!r}: {exc}") from None
        job = ref.call(*args, **kwargs)
        # TaskResult checks the arguments are JSON (TypeError "Unsupported type"): before the push.
        result = TaskResult(
            task=task,
            id=job.id,
            status=TaskResultStatus.READY,
            enqueued_at=_dt(job.sent_at_ms),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        self.tasks[task.module_path] = task
        if task.queue_name not in self._queues_seen:
            self._note_queue(task.queue_name)
        return job, result

    def _note_queue(self, queue: str) -> None:
        """Log once per queue: a job sent to a queue outside JOBSITE["QUEUES"] (the backend's
        QUEUES allowed it) waits until a worker is started for that queue."""
        with self._refs_lock:
            if queue in self._queues_seen:
                return
            self._queues_seen.add(queue)
        try:
            check_queue(queue)
        except ConfigError:
            log.warning(
                "django.tasks job sent to a queue outside JOBSITE['QUEUES'] queue=%s backend=%s "
                'allowed_by=%s fix=\'add it to JOBSITE["QUEUES"], or run a worker with '
                "runworker --queues %s; health reports the queue failing while jobs wait in it'",
                queue,
                self.alias,
                self.queue_rule,
                queue,
            )

    def enqueue[**P, R](
        self, task: djtasks.Task[P, R], args: Any, kwargs: Any
    ) -> djtasks.TaskResult[P, R]:
        """Enqueue at once (or through the outbox when that option is on); then send
        task_enqueued, as Django's own backends do: a receiver finds the job (a push that
        failed sends nothing).

        (The results are built for a task of any function, hence the casts to `task`'s types.)
        """
        job, result = self._prepare(task, args, kwargs)
        if not self.outbox and transaction.get_connection().in_atomic_block:
            self._warn_before_commit(job.task)
        pushed = services.submit(job, outbox=self.outbox, queue_accepted_by=self.queue_rule)
        if pushed.id != result.id:  # deduplicated: the result is the job holding the id
            done = self.get_result(pushed.id)
        else:
            done = self._ended_or(pushed, result)
        task_enqueued.send(type(self), task_result=done)
        return cast("djtasks.TaskResult[P, R]", done)

    def _warn_before_commit(self, name: str) -> None:
        """Log once per task: an enqueue inside transaction.atomic() reaches Redis before the
        commit (a worker may run before the row it reads exists, or for a rolled-back one)."""
        with self._refs_lock:
            if name in self._warned:
                return
            self._warned.add(name)
        log.warning(
            "enqueue inside transaction.atomic() reaches Redis before the commit task=%s "
            'backend=%s fix=\'set "OPTIONS": {"TRANSACTIONAL_OUTBOX": True} on the '
            "backend (docs/install.md), or enqueue in transaction.on_commit()'",
            name,
            self.alias,
        )

    def _ended_or(self, pushed: EngineJob, prepared: TaskResult) -> TaskResult:
        """Return the result of a job that ended as it was enqueued (a parent had failed),
        else `prepared`."""
        return self.to_result(pushed, mirrored=False) if pushed.state.is_terminal else prepared

    async def aenqueue[**P, R](
        self, task: djtasks.Task[P, R], args: Any, kwargs: Any
    ) -> djtasks.TaskResult[P, R]:
        """Enqueue on the engine's async path (no outbox: there is no transaction here).

        task_enqueued goes out once the job is in Redis, as from `enqueue`: on the loop while
        only receivers that may run there listen (`_loop_safe`), else through `asend`.
        """
        job, result = self._prepare(task, args, kwargs)
        pushed = await services.asubmit(job, queue_accepted_by=self.queue_rule)
        if pushed.id != result.id:  # deduplicated: the result is the job holding the id
            done = await self.aget_result(pushed.id)
        else:
            done = self._ended_or(pushed, result)
        if _loop_safe(task_enqueued, type(self)):
            task_enqueued.send(type(self), task_result=done)
        else:
            await task_enqueued.asend(type(self), task_result=done)
        return cast("djtasks.TaskResult[P, R]", done)

    def get_result(self, result_id: str) -> TaskResult:
        """Read the job from Redis, or from the mirrored history once Redis forgot it.

        Called from a coroutine (a sync `refresh()` in async code, as Django's own tests do), it
        reads the database in a thread of its own, as Django requires of async code; its Redis
        reads always run on the engine's loop thread.
        """
        if _on_event_loop():
            return _in_a_thread(self._read_result, result_id)
        return self._read_result(result_id)

    def _read_result(self, result_id: str) -> TaskResult:
        job: EngineJob | None
        try:
            job = services.run_engine(lambda c: c.jobs.get(result_id))
        except JobNotFound:
            job = services.outboxed(result_id)
        if job is None:
            row = JobRecord.objects.filter(id=result_id).first()
            if row is None:
                raise TaskResultDoesNotExist(result_id)
            job = EngineJob.from_dict(
                {
                    f: getattr(row, f)
                    for f in (
                        "id",
                        "task",
                        "queue",
                        "version",
                        "args",
                        "kwargs",
                        "result",
                        "errors",
                        "attempt",
                        "worker",
                    )
                }
                | {
                    "state": row.state,
                    "sent_at_ms": int(row.sent_at.timestamp() * 1000) if row.sent_at else None,
                }
            )
        return self.to_result(job)

    def to_result(self, job: EngineJob, mirrored: bool = True) -> TaskResult:
        """Map an engine job onto a django.tasks TaskResult; `mirrored=False` for a job that
        ended as it was enqueued (eager mode, a failed parent): no history row to read, so a
        unit test without database access can enqueue."""
        task = self.tasks.get(job.task)
        if task is None:
            raise TaskResultDoesNotExist(f"{job.id}: task {job.task!r} is not in TASK_MODULES")
        errors = [
            TaskError(
                exception_class_path=e.get("exception") or "builtins.Exception",
                traceback=e.get("traceback") or f"{e.get('type', '')}: {e.get('message', '')}",
            )
            for e in job.errors
            if isinstance(e, dict)
        ]
        result = TaskResult(
            task=task,
            id=job.id,
            status=STATUS.get(job.state, TaskResultStatus.FAILED),
            enqueued_at=_dt(job.sent_at_ms),
            started_at=_dt(job.started_at_ms),
            finished_at=_dt(job.completed_at_ms),
            last_attempted_at=_dt(job.retried_at_ms or job.started_at_ms),
            args=job.args if isinstance(job.args, list) else [],
            kwargs=job.kwargs if isinstance(job.kwargs, dict) else {},
            backend=self.alias,
            errors=errors,
            worker_ids=_worker_ids(job) if mirrored else [job.worker or ""] * job.attempt,
        )
        object.__setattr__(result, "_return_value", job.result)
        return result


def _on_event_loop() -> bool:
    """Tell whether this thread runs an event loop (the ORM refuses sync queries there)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _in_a_thread[T](fn: Callable[[str], T], arg: str) -> T:
    """Run `fn(arg)` in a short-lived thread and wait for it, closing that thread's database
    connections after."""

    def call() -> T:
        try:
            return fn(arg)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobsite-result") as pool:
        return pool.submit(call).result()


def _worker_ids(job: EngineJob) -> list[str]:
    """Return the worker of each attempt: from the mirrored history, the last one from Redis."""
    if not job.attempt:
        return []
    row = JobRecord.objects.filter(id=job.id).only("transitions").first()
    timeline = row.timeline() if row is not None else []
    started = [t.get("worker", "") for t in timeline if t.get("to") == "started"][: job.attempt]
    # Attempts the mirror has not written yet ran on the worker Redis names last.
    return started + [job.worker or ""] * (job.attempt - len(started))
