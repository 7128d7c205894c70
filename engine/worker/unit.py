"""A claimed job as a unit of work: it runs, stops and finishes itself (Sidekiq's unit of work)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from ..dev import failpoints
from ..errors import ConfigError
from ..job import Job
from ..keys import QueueKeys
from ..running.context import JobContext
from ..running.isolate import Isolation, IsolationUnavailable, Lanes
from ..running.runner import (
    Kind,
    Outcome,
    Runner,
    StopReason,
    error_info,
    options_for,
    stopped_outcome,
)
from ..seam.scripts import Claimed
from ..settings import EngineSettings
from ..stream import tracing
from ..stream.hooks import HookEvent, Hooks
from ..task import Registry, Task, TaskOptions
from .context import WorkerContext
from .sidewrites import SideWrites

log = logging.getLogger("engine.worker")


class Holder(Protocol):
    """What holds the claims and lets one go (the worker's Book, engine/worker/book.py)."""

    def drop(self, rec: RunningJob) -> None: ...

    def finish(self, rec: RunningJob, outcome: Outcome | None) -> None: ...


class JobWrites(Protocol):
    """What a running job writes and reads through its worker (Upkeep, engine/worker/upkeep.py)."""

    async def progress(self, job: Job, pct: float, message: str) -> int: ...

    async def log(self, job: Job, message: str, line_id: str = "") -> int: ...

    async def checkpoint(self, job: Job, state: bytes) -> int: ...

    async def parent_results(self, job: Job) -> dict[str, Any]: ...

    async def parent_errors(self, job: Job) -> dict[str, Any]: ...


@dataclass(eq=False, slots=True)
class RunningJob:
    """A job this worker claimed, from its claim to its outcome queued for writing.

    Built with positional arguments (Attempts.prepare): keep the order of the fields, or change
    it there too.
    """

    job: Job
    keys: QueueKeys
    task: Task | None
    opts: TaskOptions | None
    ctx: JobContext
    book: Holder
    handle: asyncio.Task[None] | None = None
    # Why the worker is stopping it (None: it is not being stopped).
    stop_reason: StopReason | None = None
    claimed_at: float = field(default_factory=time.monotonic)
    # Why the job cannot run at all (a payload written past the client's checks).
    poison: str | None = None
    # Runs alone in the worker's child process (a suspect: an earlier run's process died).
    isolated: bool = False
    # The claim began it (claim-12.lua): it starts without begin-2.lua.
    begun: bool = False

    def lease_ms(self, lease_ms: int) -> int:
        """Return the lease to grant; capped so a task silent past its heartbeat limit stalls."""
        limit = self.opts.max_heartbeat_interval_s if self.opts else None
        if limit is None or self.handle is None:
            return lease_ms
        left_ms = int((limit - (time.monotonic() - self.ctx.last_heartbeat)) * 1000)
        return max(0, min(lease_ms, left_ms))

    def stop(self, reason: StopReason) -> None:
        """Stop it: cancel its coroutine and tell sync code through job.cancelled; one not
        started yet (waiting for its task's slot) is dropped."""
        if self.stop_reason is not None:
            return
        self.stop_reason = reason
        self.ctx.cancel()
        if self.handle is not None:
            self.handle.cancel()
        else:
            self.book.drop(self)

    def finish(self, outcome: Outcome | None) -> None:
        """Give back its slots and queue its outcome (None: nothing to write)."""
        self.book.finish(self, outcome)


def check_heartbeat_limits(settings: EngineSettings, registry: Registry) -> None:
    """Raise ConfigError for tasks whose max_heartbeat_interval_s is under two heartbeats.

    The worker renews a lease every heartbeat_interval_s, capped at the task's last heartbeat
    plus that limit: a shorter one lapses between two renewals even while the task heartbeats.
    """
    floor = settings.stale_floor_s
    short = sorted(
        f"{t.name} ({t.options.max_heartbeat_interval_s:g} s)"
        for t in registry
        if t.options.max_heartbeat_interval_s is not None
        and t.options.max_heartbeat_interval_s < floor
    )
    if short:
        raise ConfigError(
            f"max_heartbeat_interval_s must be at least twice the worker's heartbeat_interval_s "
            f"({settings.heartbeat_interval_s:g} s), {floor:g} s: {', '.join(short)}. Raise the "
            "task's limit or lower heartbeat_interval_s; a task that heartbeats would stall "
            "between two lease renewals"
        )


class Attempts:
    """Run claimed jobs to their outcome, here or (a suspect) alone in a child process."""

    def __init__(
        self,
        ctx: WorkerContext,
        registry: Registry,
        executor: Executor,
        isolation: Isolation | None,
        hooks: Hooks,
        side: SideWrites,
        upkeep: JobWrites,
    ) -> None:
        self.settings = ctx.settings
        self.worker_id = ctx.worker_id
        self.registry = registry
        self.runner = Runner(registry, executor)
        # The children suspects run alone in (None: run here).
        self.lane = _lanes(ctx, isolation or Isolation.for_tasks(registry))
        self.hooks = hooks
        self.side = side
        self.upkeep = upkeep
        # Spans per run only when the application set up an OpenTelemetry SDK before this.
        self.traced = tracing.active()
        self._lines = 0
        check_heartbeat_limits(ctx.settings, registry)
        # Tasks whose jobs came with a max_heartbeat_interval_s below the floor, told once.
        self._raised: set[str] = set()
        # WORKER_TIMEOUT by queue (EngineSettings.worker_timeout_for), as found.
        self._worker_timeouts: dict[str, float | None] = {}
        # What each JobContext writes and reads through, bound once (not per job).
        self._progress = self.write_progress
        self._results = self.upkeep.parent_results
        self._log = self.write_log
        self._checkpoint = self.write_checkpoint
        self._errors = self.upkeep.parent_errors

    def prepare(self, keys: QueueKeys, row: Claimed, book: Holder) -> RunningJob:
        """Make a claimed row a job to run (one whose payload is too large fails unrun)."""
        size = len(row.args or "") + len(row.kwargs or "")
        poison = None
        limit = self.settings.max_payload_bytes
        if size > limit:
            row = row._replace(args="[]", kwargs="{}")
            poison = f"payload of {size} bytes is over {limit}"
        job = row.to_job(keys.queue)
        task = self.registry.get(job.task, job.version)
        opts: TaskOptions | None
        if task is None:
            opts = None
        elif not job.options:
            opts = task.options  # the task's own (its heartbeat limit was checked at start)
        else:
            opts = self._floored(job, options_for(task, job))
        now = time.monotonic()
        # Both built with positional arguments, in their fields' order: keywords cost a job a
        # few tenths of a µs.
        ctx = JobContext(
            job,
            self.worker_id,
            self._progress,
            asyncio.get_running_loop(),
            self._results,
            self._log,
            False,  # _cancelled
            now,  # last_heartbeat: the job begins now
            False,  # touched
            self._checkpoint,
            self.settings.checkpoint_max_bytes,
            self._errors,
        )
        # handle, stop_reason, claimed_at, poison, isolated, begun
        return RunningJob(
            job, keys, task, opts, ctx, book, None, None, now, poison, False, bool(row.begun)
        )

    def _floored(self, job: Job, opts: TaskOptions) -> TaskOptions:
        """Return `opts` with a max_heartbeat_interval_s the call sent below two heartbeats
        raised to two (the task's own was checked at start): the worker renews the lease only
        every heartbeat, so a shorter limit would stall a job that heartbeats."""
        limit = opts.max_heartbeat_interval_s
        floor = self.settings.stale_floor_s
        if limit is None or limit >= floor:
            return opts
        if job.task not in self._raised:
            self._raised.add(job.task)
            log.warning(
                "max_heartbeat_interval_s raised to twice the heartbeat task=%s job=%s "
                "sent_s=%g used_s=%g heartbeat_interval_s=%g",
                job.task,
                job.id,
                limit,
                floor,
                self.settings.heartbeat_interval_s,
            )
        return dataclasses.replace(opts, max_heartbeat_interval_s=floor)

    def suspects_wanted(self, running: Callable[[], int]) -> int:
        """Return how many suspects to claim beside the `running()` ones: one per idle child (-1:
        any; `running` is not called then, as it counts every claim held)."""
        return -1 if self.lane is None else max(0, self.lane.size - running())

    def start(self, rec: RunningJob) -> None:
        """Run a begun job in a task of its own, started eagerly: its first step runs now.

        A job that never waits (a quick async task) ends inside this call and never goes
        through the event loop's queue; one that waits is scheduled like any other task.
        """
        failpoints.hit("after_begin")
        handle = asyncio.Task(self._run(rec), loop=asyncio.get_running_loop(), eager_start=True)
        rec.handle = handle
        if not handle.done():  # one that ended in its first step was not cancelled before it
            handle.add_done_callback(partial(_cancelled_before_start, rec))

    async def _run(self, rec: RunningJob) -> None:
        if self.traced:
            with tracing.run_span(rec.job) as span:
                outcome = await self._attempt(rec)
                if outcome is not None and span is not None:
                    tracing.record_outcome(span, outcome.kind, outcome.error)
        else:
            outcome = await self._attempt(rec)
        if self.side.holds(rec.job):
            # Its held progress and log lines go first (its outcome would fence them); stopped
            # meanwhile, its outcome is known and is queued all the same.
            with contextlib.suppress(asyncio.CancelledError):
                await self.side.settle(rec.job, self.settings.lease_ms / 1000)
        rec.finish(outcome)
        if outcome is not None and self.hooks.hooks:
            # A retry or a dead letter reaches the hooks from the event stream (TransitionHooks).
            kind = "completed" if outcome.kind == Kind.COMPLETE else outcome.kind
            event = HookEvent("after_run", rec.job, self.worker_id, kind, outcome.error)
            await self.hooks.emit(event)

    async def _attempt(self, rec: RunningJob) -> Outcome | None:
        """Run one claimed job; return its outcome (None: nothing to write)."""
        outcome: Outcome | None
        opts = self._default_timeout(rec)
        try:
            if rec.poison is not None:
                error = error_info(rec.job, None, "PayloadTooLarge", rec.poison)
                outcome = Outcome(rec.job, Kind.FAILED, error=error)
            elif rec.isolated and self.lane is not None:
                outcome = await self._run_isolated(rec, self.lane)
            elif rec.task is not None and opts is not None and not self.hooks.hooks:
                # The hot path: the task and options found at the claim (no hook ran since to
                # change the job's options), nothing built per job for hooks.
                outcome = await self.runner.run_task(rec.task, opts, rec.job, rec.ctx)
            else:
                if self.hooks.hooks:
                    await self.hooks.emit(HookEvent("before_run", rec.job, self.worker_id))
                outcome = await self.runner.run(rec.job, rec.ctx)
        except asyncio.CancelledError:
            outcome = stopped_outcome(rec.job, rec.stop_reason)
        except Exception as exc:  # a bug in the engine itself: fail the job, keep the worker
            log.exception("runner error job=%s worker=%s", rec.job.id, self.worker_id)
            error = error_info(rec.job, exc, "EngineError", repr(exc))
            outcome = Outcome(rec.job, Kind.FAILED, error=error)
        if outcome is not None and rec.ctx.cancelled and outcome.kind in (Kind.RETRY, Kind.FAILED):
            outcome.kind = Kind.CANCELLED
        return outcome

    def _default_timeout(self, rec: RunningJob) -> TaskOptions | None:
        """Give a job whose task and call set no timeout_s the settings' WORKER_TIMEOUT; return
        the options its task runs under (None: no task of its name here)."""
        job, task = rec.job, rec.task
        if task is None:
            return None
        if task.options.timeout_s is None and "timeout_s" not in job.options:
            try:
                timeout_s = self._worker_timeouts[job.queue]
            except KeyError:  # the settings are frozen: looked up once a queue
                timeout_s = self._worker_timeouts[job.queue] = self.settings.worker_timeout_for(
                    job.queue
                )
            if timeout_s is not None:
                job.options = {**job.options, "timeout_s": timeout_s}
                return options_for(task, job)
        # Found at the claim: those the runner reads are options_for's (only
        # max_heartbeat_interval_s may be floored, which the runner does not read).
        return rec.opts

    async def _run_isolated(self, rec: RunningJob, lane: Lanes) -> Outcome:
        """Run a suspect alone in the child process; its lease is renewed here meanwhile."""
        results = await self.upkeep.parent_results(rec.job) if rec.job.parents else None
        errors = await self.upkeep.parent_errors(rec.job) if rec.job.parents else None

        async def progress(pct: float, message: str) -> None:
            await self.write_progress(rec.job, pct, message)

        async def log_line(message: str) -> None:
            await self.write_log(rec.job, message)

        async def checkpoint(state: bytes) -> None:
            await self.write_checkpoint(rec.job, state)

        try:
            return await lane.run(
                rec.job, results, rec.ctx.touch, progress, log_line, checkpoint, errors
            )
        except IsolationUnavailable as exc:
            # Not the job's fault: run suspects here from now on, like any other job.
            log.error(
                "suspects run in the worker from now on worker=%s error=%s", self.worker_id, exc
            )
            self.lane = None
            await lane.close()
            return await self.runner.run(rec.job, rec.ctx)

    async def write_progress(self, job: Job, pct: float, message: str) -> None:
        """Write a job's progress (held while Redis is away)."""
        await self.side.write(job, "progress", partial(self.upkeep.progress, job, pct, message))

    async def write_checkpoint(self, job: Job, state: bytes) -> None:
        """Save a job's checkpoint JSON, b"" deleting it (the newest held while Redis is away)."""
        await self.side.write(job, "checkpoint", partial(self.upkeep.checkpoint, job, state))

    async def write_log(self, job: Job, message: str) -> None:
        """Append a line to a job's log (held while Redis is away)."""
        self._lines += 1  # a line id: a write retried after a timeout is stored once
        line = partial(self.upkeep.log, job, message, str(self._lines))
        await self.side.write(job, "log", line)


def _lanes(ctx: WorkerContext, isolation: Isolation | None) -> Lanes | None:
    """Return the children suspects run alone in (None: tasks not loadable there; run here)."""
    if not isolation:
        log.warning("no isolation for suspects: a task module is not importable by name")
        return None
    # A line up holds a result, a checkpoint (as a JSON string: twice its size at most) or a
    # line of log; one down a payload and a checkpoint.
    limit = ctx.settings.checkpoint_max_bytes
    line_limit = 4 * ctx.settings.max_payload_bytes + 2 * limit + (1 << 20)
    return Lanes(isolation, ctx.worker_id, line_limit, ctx.settings.isolation_processes, limit)


def _cancelled_before_start(rec: RunningJob, handle: asyncio.Task[None]) -> None:
    """Finish a job whose task was cancelled before its first step (no code of it ran)."""
    if handle.cancelled():
        rec.finish(stopped_outcome(rec.job, rec.stop_reason))
