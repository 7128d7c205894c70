"""The worker: claims jobs in batches, begins and runs them in slots, flushes outcomes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from redis.asyncio import Redis

from . import failpoints, tracing
from .claiming import ClaimSteps
from .cleaner import Cleaner
from .cluster import is_cluster, per_slot
from .connection import connect
from .errors import ConfigError, LoopCrashed
from .hooks import Hook, HookEvent, Hooks
from .isolate import Isolation, IsolationUnavailable, Lanes
from .job import Job
from .keys import QueueKeys, stop_field
from .liveness import Liveness
from .outcomes import OutcomeWriter
from .reconnect import Reconnect
from .recycle import Recycler
from .roles import RoleFollower
from .runner import Kind, Outcome, Runner, StopReason, error_info, stopped_outcome
from .scheduler import Scheduler
from .scripts import Scripts
from .settings import EngineSettings
from .shutdown import ShutdownSteps
from .sidewrites import SideWrites
from .task import Registry, Task
from .transitions import TransitionHooks
from .upkeep import Running, Upkeep
from .versions import Versions

# Outcome writes in flight at once: an outcome goes to Redis as soon as its job ends while fewer
# are in flight (its window to a SIGKILL is one round trip); beyond, outcomes gather into the
# next write, so batches form only under load.
MAX_FLUSHES = 2
# How many windows (job end -> outcome durable, seconds) a worker keeps for its benchmark.
WINDOWS_KEPT = 10_000

log = logging.getLogger("engine.worker")


class Worker(ClaimSteps, ShutdownSteps):
    """Run jobs from one or more queues (claimed in the given order), `concurrency` at once."""

    def __init__(
        self,
        settings: EngineSettings,
        tasks: Iterable[Task],
        queues: Sequence[str] | None = None,
        concurrency: int = 10,
        burst: bool = False,
        worker_id: str | None = None,
        queue_concurrency: Mapping[str, int] | None = None,
        isolation: Isolation | None = None,
        hooks: Iterable[Hook] = (),
        role: str | None = None,
    ) -> None:
        if role is not None and queues is not None:
            raise ConfigError("give a worker its queues or a role, not both")
        self.settings = settings
        # A role's queues are read at run() and followed while running (engine/roles.py).
        self.role = RoleFollower(settings.prefix, role) if role is not None else None
        if queues is None:
            queues = () if role is not None else ("default",)
        self.hooks = Hooks(hooks)
        # Spans per run only when the application set up an OpenTelemetry SDK before this.
        self.traced = tracing.active()
        self.registry = Registry(tasks)
        self.queues = [QueueKeys(settings.prefix, q) for q in queues]
        self.concurrency = concurrency
        self.queue_limits = dict(queue_concurrency or {})
        # Tasks whose jobs may wait for a slot of their own (max_concurrent): claimed, not begun.
        self.held = sorted({t.name for t in self.registry if t.options.max_concurrent is not None})
        self.burst = burst
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._connect()
        self.executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="job")
        self.runner = Runner(self.registry, self.executor)
        self.lane = _lanes(settings, isolation or Isolation.for_tasks(self.registry), self.id)
        self.counters: dict[str, int] = defaultdict(int)
        self.writer = OutcomeWriter(settings, self.scripts, self.id, self.counters)
        self.upkeep = Upkeep(settings, self.redis, self.scripts, self.id)
        self._lines = 0
        self.side = SideWrites(self._side_code, self._crash_on_bug, settings.job_log_max_lines)
        self.versions = Versions(settings, self.registry, self.queues)
        names = [k.queue for k in self.queues]
        self.scheduler = Scheduler(settings, self.redis, names)
        self.liveness = Liveness(settings, self.id, self._crash_from_thread)
        self.cleaner = Cleaner(settings, self.redis, names, liveness=self.liveness)
        # Every claim (by token: a job reaped and claimed again is a new claim) until its outcome
        # is queued; `waiting` holds those not begun yet.
        self._active: dict[str, Running] = {}
        self._waiting: dict[str, deque[Running]] = defaultdict(deque)
        self._per_task: dict[str, int] = defaultdict(int)
        self._outcomes: list[Outcome] = []
        self._writing: list[Outcome] = []  # the outcomes the flusher is writing now
        # Queues where a claim or begin failed: the server may hold jobs for this worker whose
        # tokens it never saw (claiming.py's _disown hands them back).
        self._lost: set[QueueKeys] = set()
        self._unflushed = 0
        self._slot_free = asyncio.Event()
        self._flush_wanted = asyncio.Event()
        self._flush_error: BaseException | None = None  # the last failed write (backs off)
        self._flush_retry = Reconnect("flush")
        # Seconds from a job's end to its outcome durable in Redis, the latest WINDOWS_KEPT.
        self.windows: deque[float] = deque(maxlen=WINDOWS_KEPT)
        self._stopping = asyncio.Event()
        # Cleared while the worker is quiet (engine/control.py): it claims nothing, runs on.
        self._claiming = asyncio.Event()
        self._claiming.set()
        self._forced = asyncio.Event()
        self._fencing: asyncio.Task[None] | None = None  # Worker.stop's fence (shutdown.py)
        self._claim_retry = Reconnect("claim")
        self.recycler = Recycler(settings)
        self.claims = 0  # jobs claimed so far (max_jobs)
        self.retired: str | None = None  # why it retired (recycling), as key=value text
        self._ahead = None
        # The first exception that killed one of the worker's loops (a bug): the process stops.
        self.crashed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # The reader of transitions for the hooks, while run() has one (hooks given).
        self._transitions: TransitionHooks | None = None

    def _connect(self) -> None:
        """Make the command client, the client for waits (with its claim on wake) and scripts."""
        self.redis: Redis = connect(self.settings)
        self.blocking: Redis = connect(self.settings, block_s=self.settings.idle_wait_s)
        # On a cluster whose slots split the queues: one BZPOPMIN per slot (engine/cluster.py).
        self._wake = per_slot(
            self.blocking, [k.marker for k in self.queues], self.blocking.bzpopmin
        )
        self.scripts = Scripts(self.redis)
        # One queue on one node: an idle worker's claim rides behind its BZPOPMIN.
        self._claim_on_wake = len(self.queues) == 1 and not is_cluster(self.blocking)

    def stop(self) -> None:
        """Stop claiming (first call); force running jobs to stop (second call)."""
        if self._stopping.is_set():
            log.warning("second signal: forcing stop worker=%s", self.id)
            self._forced.set()
        self._fence()
        self._slot_free.set()
        self._claiming.set()  # a quiet worker's claim loop wakes to see the stop

    def retire(self, reason: str) -> None:
        """Stop claiming for good, let running jobs finish, exit 0: a fresh worker follows."""
        if self.retired is not None or self._stopping.is_set():
            return
        self.retired = reason
        self.liveness.status.state = "retiring"
        log.info("worker retiring id=%s %s", self.id, reason)
        self.stop()

    def _obey(self, order: str | None) -> None:
        """Follow an order of engine/control.py: quiet, resume (no order) or stop."""
        if self._stopping.is_set():
            return
        if order == "stop":
            log.info("worker stopping id=%s by=control", self.id)
            self.stop()
        elif order == "quiet" and self._claiming.is_set():
            self._claiming.clear()
            self.liveness.status.state = "quiet"
            log.info("worker quiet id=%s claims=off by=control", self.id)
        elif order is None and not self._claiming.is_set():
            self._claiming.set()
            self.liveness.status.state = "claiming"
            log.info("worker resumed id=%s claims=on by=control", self.id)

    def _check_recycle(self) -> None:
        if self.retired is None and (reason := self.recycler.reason(self.claims)) is not None:
            self.retire(reason)

    async def run(self) -> None:
        """Run until stopped, or until the queues are empty in burst mode.

        A worker with a role takes its queues from it first: ConfigError when there is none.
        """
        if self.role is not None:
            await self._start_role(self.role)
        log.info(
            "worker started id=%s role=%s queues=%s concurrency=%d burst=%s url=%s",
            self.id,
            self.role.name if self.role else "-",
            ",".join(k.queue for k in self.queues),
            self.concurrency,
            self.burst,
            self.settings.redacted_url,
        )
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.liveness.start, self._loop)
        if self.lane is not None:
            self.lane.warm()
        # Transitions made anywhere (cleaner, clients, other workers) reach the hooks from the
        # event stream (engine/transitions.py); it drains once the last outcome is written.
        flushed = asyncio.Event()
        transitions = self._transitions = None
        if self.hooks.hooks:
            names = [k.queue for k in self.queues]
            transitions = TransitionHooks(self.settings, names, self.hooks, self.id)
            self._transitions = transitions
            try:
                await transitions.prepare(self.redis)
            except Exception as exc:  # its loop makes the groups once Redis answers
                log.warning("transition hooks not ready worker=%s error=%r", self.id, exc)
        loops = [
            asyncio.create_task(self._guard("flusher", self._flush_loop())),
            asyncio.create_task(self._guard("upkeep", self._upkeep_loop())),
            asyncio.create_task(self._guard("scheduler", self.scheduler.run(self._stopping))),
            asyncio.create_task(self._guard("cleaner", self.cleaner.run(self._stopping))),
        ]
        if transitions is not None:
            loops.append(asyncio.create_task(self._guard("hooks", transitions.run(flushed))))
        try:
            await self._advertise_versions()
            await self._guard("claim", self._claim_loop())
            await self._shutdown()
        finally:
            self._stopping.set()
            self._flush_wanted.set()
            # After a crash, Redis may never answer again: the leases hand the jobs back then.
            timeout_s = self.settings.shutdown_grace_s if self.crashed else None
            await asyncio.wait([loops[0]], timeout=timeout_s)
            flushed.set()
            if len(loops) > 4:
                await asyncio.wait([loops[4]], timeout=self.settings.shutdown_grace_s)
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await asyncio.to_thread(self.liveness.stop)
            await self.side.close()
            await self._deregister()
            if self._fencing is not None:
                await self._fencing
                await self._unfence()
            self.executor.shutdown(wait=False, cancel_futures=True)
            if self.lane is not None:
                await self.lane.close()
            await self.redis.aclose()
            if self._wake is not None:
                await self._wake.close()
            await self.blocking.aclose()
            stats = " ".join(f"{k}={v}" for k, v in sorted(self.counters.items()))
            log.info("worker stopped id=%s %s", self.id, stats)
        if self.crashed is not None:
            raise LoopCrashed(f"worker {self.id}: a loop crashed") from self.crashed

    async def _start_role(self, role: RoleFollower) -> None:
        """Take the role's queues (waiting while Redis is away); an unknown role ends the worker
        before it starts anything."""
        retry = Reconnect("role")
        while True:
            try:
                await self.follow_queues(await role.load(self.redis))
                return
            except ConfigError:
                await self.redis.aclose()
                await self.blocking.aclose()
                raise
            except Exception as exc:
                await retry.failed(exc)

    async def _follow_role(self, role: RoleFollower) -> None:
        """Swap to the role's queues when they changed (read with each registry renewal)."""
        names = await role.changed(self.redis)
        if names is not None:
            try:
                await self.follow_queues(names)
            except BaseException:
                role.unread()  # Redis failed meanwhile: read the role again next time
                raise

    async def follow_queues(self, names: Sequence[str]) -> None:
        """Claim from the queues `names` (in order) from now on; jobs claimed from the others
        run to their end. The one step that changes a running worker's queues (a role's)."""
        new = [QueueKeys(self.settings.prefix, q) for q in names]
        old = self.queues
        if new == old:
            return
        # Its task versions are named in a new queue before its first claim there.
        self.versions.serve(new)
        await self.versions.advertise(self.redis, force=True)
        if self._transitions is not None:  # its hooks read a new queue's events from its first
            self._transitions.follow(names)
            await self._transitions.prepare(self.redis)
        self.queues = new
        self.scheduler.queues = list(new)
        self.cleaner.queues = list(new)
        wake, self._wake = (
            self._wake,
            per_slot(self.blocking, [k.marker for k in new], self.blocking.bzpopmin),
        )
        self._claim_on_wake = len(new) == 1 and not is_cluster(self.blocking)
        added = [k for k in new if k not in old]
        removed = [k for k in old if k not in new]
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for keys in removed:  # a quiet worker's claim fence stays only where it claims
                    pipe.hdel(keys.meta, stop_field(self.id))
                if self.liveness.status.state == "quiet":
                    for keys in added:
                        pipe.hset(keys.meta, stop_field(self.id), "1")
                if old:  # end the wait on the old queues' markers now (others claim nothing)
                    pipe.zadd(old[0].marker, {"0": 0})
                await pipe.execute()
        finally:
            if wake is not None:
                await wake.close()
        if old:
            log.info(
                "worker queues changed id=%s role=%s queues=%s was=%s",
                self.id,
                self.role.name if self.role else "-",
                ",".join(names),
                ",".join(k.queue for k in old),
            )

    async def _advertise_versions(self) -> None:
        """Name this worker's task versions before its first claim (else it would claim jobs of
        versions it lacks); wait while Redis is away."""
        retry = Reconnect("versions")
        while not self._stopping.is_set():
            try:
                await self.versions.advertise(self.redis, force=True)
                return
            except Exception as exc:
                await retry.failed(exc)

    async def _guard(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        """Run one loop; a bug in it stops the whole worker (it must not live on without it)."""
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.critical("loop crashed loop=%s worker=%s; stopping", name, self.id, exc_info=exc)
            self._crash(exc)

    def _crash_on_bug(self, task: asyncio.Task[None]) -> None:
        """Stop the worker if a detached step died of a bug (nothing else awaits it)."""
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            log.critical("step crashed worker=%s; stopping", self.id, exc_info=exc)
            self._crash(exc)

    def _crash_from_thread(self, exc: BaseException) -> None:
        """Stop the worker after a bug in a thread of its own (the liveness thread)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._crash, exc)

    def _crash(self, exc: BaseException) -> None:
        """Stop the worker after a bug: hand running jobs back, then exit non-zero."""
        if self.crashed is None:
            self.crashed = exc
        self._fence()
        self._forced.set()
        self._slot_free.set()
        self._flush_wanted.set()

    async def _run_one(self, rec: Running) -> None:
        with tracing.run_span(rec.job) if self.traced else tracing.OFF as span:
            outcome = await self._attempt(rec)
            if outcome is not None and span is not None:
                tracing.record_outcome(span, outcome.kind, outcome.error)
        if self.side.holds(rec.job):
            await self._settle(rec)
        self._finish(rec, outcome)
        if outcome is not None and self.hooks.hooks:
            await self._after_hooks(rec, outcome)

    async def _attempt(self, rec: Running) -> Outcome | None:
        """Run one claimed job; return its outcome (None: nothing to write)."""
        outcome: Outcome | None
        self._default_timeout(rec.job)
        try:
            if rec.poison is not None:
                error = error_info(rec.job, None, "PayloadTooLarge", rec.poison)
                outcome = Outcome(rec.job, Kind.FAILED, error=error)
            elif rec.isolated and self.lane is not None:
                outcome = await self._run_isolated(rec, self.lane)
            else:
                if self.hooks.hooks:  # nothing built per job without hooks (the hot path)
                    await self.hooks.emit(HookEvent("before_run", rec.job, self.id))
                outcome = await self.runner.run(rec.job, rec.ctx)
        except asyncio.CancelledError:
            outcome = stopped_outcome(rec.job, rec.stop_reason)
        except Exception as exc:  # a bug in the engine itself: fail the job, keep the worker
            log.exception("runner error job=%s worker=%s", rec.job.id, self.id)
            outcome = Outcome(
                rec.job, Kind.FAILED, error=error_info(rec.job, exc, "EngineError", repr(exc))
            )
        if outcome is not None and rec.ctx.cancelled and outcome.kind in (Kind.RETRY, Kind.FAILED):
            outcome.kind = Kind.CANCELLED
        return outcome

    async def _after_hooks(self, rec: Running, outcome: Outcome) -> None:
        """Tell the hooks how the attempt ended (after its outcome is queued for writing); a
        retry or a dead letter reaches them from the event stream (TransitionHooks)."""
        kind = "completed" if outcome.kind == Kind.COMPLETE else outcome.kind
        event = partial(
            HookEvent, job=rec.job, worker_id=self.id, outcome=kind, error=outcome.error
        )
        await self.hooks.emit(event("after_run"))

    def _default_timeout(self, job: Job) -> None:
        """Give a job whose task and call set no timeout_s the settings' WORKER_TIMEOUT."""
        timeout_s = self.settings.worker_timeout_for(job.queue)
        if timeout_s is None or "timeout_s" in job.options:
            return
        task = self.registry.get(job.task, job.version)
        if task is not None and task.options.timeout_s is None:
            job.options = {**job.options, "timeout_s": timeout_s}

    async def _run_isolated(self, rec: Running, lane: Lanes) -> Outcome:
        """Run a suspect alone in the child process; its lease is renewed here meanwhile."""
        results = await self.upkeep.parent_results(rec.job) if rec.job.parents else None

        async def progress(pct: float, message: str) -> None:
            await self._write_progress(rec.job, pct, message)

        async def log_line(message: str) -> None:
            await self._write_log(rec.job, message)

        try:
            return await lane.run(rec.job, results, rec.ctx.touch, progress, log_line)
        except IsolationUnavailable as exc:
            # Not the job's fault: run suspects here from now on, like any other job.
            log.error("suspects run in the worker from now on worker=%s error=%s", self.id, exc)
            self.lane = None
            await lane.close()
            return await self.runner.run(rec.job, rec.ctx)

    def _cancelled_before_start(self, rec: Running, handle: asyncio.Task[None]) -> None:
        """Finish a job whose task was cancelled before its first step (no code of it ran)."""
        if handle.cancelled():
            self._finish(rec, stopped_outcome(rec.job, rec.stop_reason))

    def _finish(self, rec: Running, outcome: Outcome | None) -> None:
        self._forget(rec)
        if outcome is not None:
            outcome.ended_at = time.monotonic()
            self._outcomes.append(outcome)
            self._unflushed += 1
            self._flush_wanted.set()
        self._task_slot_free(rec.job.task)

    def _forget(self, rec: Running) -> None:
        key = rec.job.token or rec.job.id
        if self._active.get(key) is rec:
            del self._active[key]
            self._slot_free.set()

    async def _write_progress(self, job: Job, pct: float, message: str) -> None:
        await self.side.write(job, "progress", partial(self.upkeep.progress, job, pct, message))

    async def _write_log(self, job: Job, message: str) -> None:
        self._lines += 1  # a line id: a write retried after a timeout is stored once
        line = partial(self.upkeep.log, job, message, str(self._lines))
        await self.side.write(job, "log", line)

    def _side_code(self, job: Job, name: str, code: int) -> None:
        if code < 0:
            self.writer.count(Outcome(job, Kind.FAILED), name, code)

    async def _settle(self, rec: Running) -> None:
        """Let the job's held progress and log lines go first (its outcome would fence them)."""
        # Stopped meanwhile: its outcome is known, queue it all the same.
        with contextlib.suppress(asyncio.CancelledError):
            await self.side.settle(rec.job, self.settings.lease_ms / 1000)

    async def _drained(self) -> bool:
        if self._active or self._unflushed:
            return False
        async with self.redis.pipeline(transaction=False) as pipe:
            for keys in self.queues:
                pipe.zcard(keys.submitted)
                pipe.zcard(keys.scheduled)
            sizes = await pipe.execute()
        return not any(sizes)

    async def _flush_loop(self) -> None:
        """Write outcomes as soon as they come, up to MAX_FLUSHES writes in flight; beyond
        that they gather into the next write (a batch forms only under load)."""
        flying: dict[asyncio.Task[None], list[Outcome]] = {}
        try:
            while True:
                await self._flush_wanted.wait()
                self._flush_wanted.clear()
                if self._flush_error is not None:  # back off before writing again
                    error, self._flush_error = self._flush_error, None
                    await self._flush_retry.failed(error)
                while self._outcomes and len(flying) < MAX_FLUSHES:
                    failpoints.bug("bug_in_flush")
                    batch, self._outcomes = self._outcomes, []
                    write = asyncio.create_task(self._write_outcomes(batch, flying))
                    flying[write] = batch
                    write.add_done_callback(self._crash_on_bug)
                    self._writing = [o for b in flying.values() for o in b]
                stopped = self._stopping.is_set() and not self._active
                if stopped and not self._outcomes and not flying:
                    return
        finally:
            for write in flying:
                write.cancel()
            await asyncio.gather(*flying, return_exceptions=True)

    async def _write_outcomes(
        self, batch: list[Outcome], flying: dict[asyncio.Task[None], list[Outcome]]
    ) -> None:
        """Write one batch; what is not written (Redis gone or refusing) goes back ahead of the
        newer outcomes, and the flusher backs off. Rewriting one is safe: the fenced scripts
        refuse what this worker no longer owns."""
        try:
            unwritten, error = await self.writer.write(batch)
        finally:
            me = asyncio.current_task()
            if me is not None:
                flying.pop(me, None)
            self._writing = [o for b in flying.values() for o in b]
        self._unflushed -= len(batch) - len(unwritten)
        self._slot_free.set()  # claims wait on unwritten outcomes too (claiming.py)
        if error is not None:
            self._outcomes[:0] = unwritten
            self._flush_error = error
        else:
            self._flush_retry.ok()
            now = time.monotonic()
            self.windows.extend(now - o.ended_at for o in batch)
        self._flush_wanted.set()

    async def _upkeep_loop(self) -> None:
        retry = Reconnect("upkeep")
        while True:
            try:
                records = list(self._active.values())
                failpoints.bug("bug_in_upkeep")
                for rec, code in await self.upkeep.renew(records):
                    if self._active.get(rec.job.token or rec.job.id) is not rec:
                        continue  # it finished while the renewal was in flight
                    if code == 1 and rec.handle is not None:
                        self._stop_job(rec, StopReason.CANCELLED)
                    elif code < 0:
                        self.writer.count(Outcome(rec.job, Kind.FAILED), "heartbeat", code)
                        self._stop_job(rec, StopReason.LEASE_LOST)
                if self.role is not None and not self._stopping.is_set():
                    await self._follow_role(self.role)
                order = await self.upkeep.register(
                    [k.queue for k in self.queues],
                    self.concurrency,
                    records,
                    self.liveness.status.state,
                    role=self.role.name if self.role else "",
                )
                self._obey(order)
                await self.versions.advertise(self.redis)
                retry.ok()
                self._check_recycle()
            except Exception as exc:
                await retry.failed(exc)
                continue
            await asyncio.sleep(self.settings.heartbeat_interval_s)


def _lanes(settings: EngineSettings, isolation: Isolation | None, worker_id: str) -> Lanes | None:
    """Return the children suspects run alone in (None: tasks not loadable there; run here)."""
    if not isolation:
        log.warning("no isolation for suspects: a task module is not importable by name")
        return None
    line_limit = 4 * settings.max_payload_bytes + (1 << 20)
    return Lanes(isolation, worker_id, line_limit, settings.isolation_processes)
