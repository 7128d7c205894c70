"""Run one claimed job and classify what happened: complete, retry, fail or drop."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import traceback
from concurrent.futures import Executor
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Any

from .. import backoff, serializer
from ..errors import TIMEOUT_CODE, InvalidArguments, Retry, RetryableError, SerializationError
from ..job import Job
from ..ops.fingerprint import fingerprint, of_exception
from ..result import TaskResult
from ..settings import DEFAULT_RESULT_TTL_S
from ..task import Registry, Task, TaskOptions
from .context import JobContext

# The error code of an attempt that ran past its timeout_s.
TIMEOUT = TIMEOUT_CODE


class Kind(StrEnum):
    """What the worker writes for a job: the script it runs (and the dead state, for fail)."""

    COMPLETE = "complete"  # complete-11.lua
    RETRY = "retry"  # retry-11.lua
    FAILED = "failed"  # fail-11.lua with that state, as the next three
    DROPPED = "dropped"
    CANCELLED = "cancelled"
    STALLED = "stalled"
    RELEASE = "release"  # release-4.lua: handed back unrun
    STALL = "stall"  # stall-11.lua: its isolated child process died


class StopReason(StrEnum):
    """Why the worker stops a running job."""

    CANCELLED = "cancelled"  # a user cancelled it: written `cancelled`
    STOP = "stop"  # shutdown with on_shutdown=stop: written `stalled`
    RESUBMIT = "resubmit"  # shutdown handing it back: released to `submitted`
    LEASE_LOST = "lease_lost"  # another worker owns it now: nothing written


_TRACEBACK_LIMIT = 16_000


@dataclass(slots=True)
class Outcome:
    """What the worker must write for a job: a kind plus its data (Runner.run_task builds one
    with positional arguments: keep the order of the fields, or change it there too)."""

    job: Job
    kind: Kind
    result: bytes = b"null"
    error: dict[str, Any] | None = None
    # Seconds before the retry; None re-queues at once.
    delay_s: float | None = None
    result_ttl_s: int = DEFAULT_RESULT_TTL_S
    # When the worker had it (time.monotonic()): the start of the window until it is durable.
    ended_at: float = 0.0
    # The code the master gave a write of it that too few replicas acknowledged (replica_acks;
    # None: none such): the write made again then finds it done, and counts as that one.
    unacked_code: int | None = None


def options_for(task: Task, job: Job) -> TaskOptions:
    """Return the task's options with the job's per-call overrides applied."""
    if not job.options:
        return task.options
    allowed = {f.name for f in dataclasses.fields(TaskOptions)}
    return dataclasses.replace(
        task.options, **{k: v for k, v in job.options.items() if k in allowed}
    )


def error_info(
    job: Job, exc: BaseException | None, kind: str, message: str, **more: Any
) -> dict[str, Any]:
    """Return the JSON error record of one attempt, with its fingerprint (ops/fingerprint.py)."""
    info: dict[str, Any] = {
        "attempt": job.attempt,
        "type": kind,
        "message": message[:2000],
        "at_ms": int(time.time() * 1000),
    }
    if exc is not None:
        info["exception"] = f"{type(exc).__module__}.{type(exc).__qualname__}"
        tb = "".join(traceback.format_exception(exc))
        info["traceback"] = tb[-_TRACEBACK_LIMIT:]
        info.update(of_exception(exc, info["exception"]).as_fields())
    else:
        info.update(fingerprint(kind, message).as_fields())
    info.update(more)
    return info


def stopped_outcome(job: Job, reason: StopReason | None) -> Outcome | None:
    """Return what to write for a job the worker stopped (None: another worker owns it now)."""
    if reason is StopReason.LEASE_LOST:
        return None
    if reason is StopReason.RESUBMIT:
        return Outcome(
            job, Kind.RELEASE, error={"type": "Shutdown", "message": "resubmitted on shutdown"}
        )
    if reason is StopReason.CANCELLED:
        return Outcome(
            job, Kind.CANCELLED, error=error_info(job, None, "Cancelled", "cancelled by user")
        )
    return Outcome(
        job, Kind.STALLED, error=error_info(job, None, "Shutdown", "stopped on shutdown")
    )


class Runner:
    """Execute jobs for a worker: async functions on the loop, sync ones in a thread pool."""

    def __init__(self, registry: Registry, executor: Executor | None) -> None:
        self.registry = registry
        self.executor = executor

    async def run(self, job: Job, ctx: JobContext) -> Outcome:
        """Run `job` once and return its outcome; never raises except on cancellation."""
        task = self.registry.get(job.task, job.version)
        if task is None:
            msg = f"no function registered for task {job.task!r} version {job.version}"
            return Outcome(job, Kind.DROPPED, error=error_info(job, None, "UnknownTask", msg))
        return await self.run_task(task, options_for(task, job), job, ctx)

    async def run_task(self, task: Task, opts: TaskOptions, job: Job, ctx: JobContext) -> Outcome:
        """Run `job` once as `task` under `opts` (options_for's, as the worker found them when it
        claimed the job); never raises except on cancellation."""
        # Positional: keywords cost a job a few tenths of a µs (Outcome's field order).
        outcome = Outcome(job, Kind.FAILED, b"null", None, None, opts.result_ttl_s)
        if not isinstance(job.args, list) or not isinstance(job.kwargs, dict):
            outcome.error = error_info(
                job, None, "InvalidPayload", "args must be a JSON list and kwargs a JSON object"
            )
            return outcome
        timer = asyncio.timeout(opts.timeout_s) if opts.timeout_s is not None else None
        try:
            if timer is not None:
                async with timer:
                    value = await self._call(task, opts, job, ctx)
            elif task.fn is not None and task.is_async:
                # The hot path (an async task without a timeout), _call inlined: one coroutine
                # less per job.
                args = [ctx, *job.args] if opts.takes_context else job.args
                value = await task.fn(*args, **job.kwargs)
            else:
                value = await self._call(task, opts, job, ctx)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise  # the worker's own stop, or Ctrl-C
        except BaseException as exc:  # SystemExit and the like end this job, not the worker
            timed_out = timer is not None and timer.expired()
            return self._classify(outcome, task, opts, exc, timed_out=timed_out)
        if value is None:  # what most tasks return: serialized as b"null", the default result
            outcome.kind = Kind.COMPLETE
            return outcome
        return self._finish(outcome, value)

    async def _call(self, task: Task, opts: TaskOptions, job: Job, ctx: JobContext) -> Any:
        assert task.fn is not None
        args: list[Any] = job.args
        if opts.takes_context:
            args = [ctx, *args]
        if task.is_async:
            return await task.fn(*args, **job.kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, partial(task.fn, *args, **job.kwargs))

    def _finish(self, outcome: Outcome, value: Any) -> Outcome:
        job = outcome.job
        if isinstance(value, TaskResult):
            if not value.is_ok:
                outcome.error = error_info(
                    job, None, "TaskResult.err", value.message, code=value.error_code
                )
                return outcome
            value = value.value
        try:
            outcome.result = serializer.dumps(value)
        except SerializationError as exc:
            outcome.error = error_info(job, None, "SerializationError", f"result: {exc}")
            return outcome
        outcome.kind = Kind.COMPLETE
        return outcome

    def _classify(
        self, outcome: Outcome, task: Task, opts: TaskOptions, exc: BaseException, timed_out: bool
    ) -> Outcome:
        job = outcome.job
        name = type(exc).__name__
        if timed_out:  # code TIMEOUT: retry_on / no_retry_on decide as for any code
            message = f"timed out after {opts.timeout_s}s"
            outcome.error = error_info(job, None, "Timeout", message, code=TIMEOUT)
            why_not = _code_refused(TIMEOUT, opts)
        elif isinstance(exc, TypeError) and self._unbindable(task, job):
            outcome.error = error_info(job, exc, "InvalidArguments", str(exc))
            outcome.error["not_retried"] = "the arguments do not fit the task"
            return outcome
        else:
            code = exc.code if isinstance(exc, RetryableError) else None
            outcome.error = error_info(job, exc, name, str(exc), **({"code": code} if code else {}))
            if isinstance(exc, (Retry, *opts.expected_exceptions)):
                why_not = None
            elif isinstance(exc, RetryableError):
                why_not = _code_refused(exc.code, opts)
            else:
                why_not = (
                    f"{name} is not in expected_exceptions (list it there, or raise Retry or "
                    "RetryableError, to retry it)"
                )
        if why_not is not None:
            outcome.error["not_retried"] = why_not
            return outcome
        if job.attempt > opts.max_retries:
            outcome.error["message"] = (
                f"retries exhausted ({opts.max_retries}): {outcome.error['message']}"
            )
            outcome.error["not_retried"] = f"retries exhausted (max_retries={opts.max_retries})"
            return outcome
        outcome.kind = Kind.RETRY
        if isinstance(exc, Retry) and exc.delay_s is not None:
            outcome.delay_s = min(max(0.0, exc.delay_s), opts.max_retry_delay_s)
        else:
            outcome.delay_s = backoff.delay_s(
                opts.backoff, job.attempt, opts.retry_delay_s, opts.max_retry_delay_s
            )
        return outcome

    @staticmethod
    def _unbindable(task: Task, job: Job) -> bool:
        try:
            task.bind_check(job.args, job.kwargs)
        except InvalidArguments:
            return True
        return False


def _code_refused(code: str, opts: TaskOptions) -> str | None:
    """Return why an error of `code` is not retried under `opts`, or None when it is."""
    if opts.retry_on and code not in opts.retry_on:
        return f"code {code} is not in retry_on"
    if code in opts.no_retry_on:
        return f"code {code} is in no_retry_on"
    return None
