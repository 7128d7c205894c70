"""The worker's claim path: claim batches while slots are free, begin and start what they hold."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict, deque
from functools import partial
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from . import failpoints
from .cluster import Fanout
from .context import JobContext
from .errors import Code, RedisUnavailable
from .isolate import Lanes
from .job import Job
from .keys import QueueKeys
from .outcomes import OutcomeWriter
from .reconnect import Reconnect
from .recycle import Recycler
from .runner import Kind, Outcome, options_for
from .scripts import BeginJob, Claimed, Scripts, claim_argv, claimed
from .settings import EngineSettings
from .task import Registry
from .upkeep import Running, Upkeep
from .versions import Versions

log = logging.getLogger("engine.worker")


class ClaimSteps:
    """Part of Worker: the claim loop, the claim script's rows as Running jobs, their start."""

    settings: EngineSettings
    id: str
    queues: list[QueueKeys]
    concurrency: int
    queue_limits: dict[str, int]
    held: list[str]
    burst: bool
    scripts: Scripts
    blocking: Redis
    _wake: Fanout | None
    _claim_on_wake: bool
    registry: Registry
    lane: Lanes | None
    upkeep: Upkeep
    _active: dict[str, Running]
    _outcomes: list[Outcome]
    _writing: list[Outcome]
    _lost: set[QueueKeys]
    _unflushed: int
    _waiting: dict[str, deque[Running]]
    _per_task: dict[str, int]
    writer: OutcomeWriter
    _slot_free: asyncio.Event
    _stopping: asyncio.Event
    _claiming: asyncio.Event
    _claim_retry: Reconnect
    recycler: Recycler
    versions: Versions
    claims: int
    # A claim sent before the jobs of the last one ran (`_claim_ahead`), not read yet.
    _ahead: asyncio.Task[tuple[list[Running], RedisUnavailable | None]] | None

    if TYPE_CHECKING:  # Worker's own steps, which these call

        async def _run_one(self, rec: Running) -> None: ...
        def _cancelled_before_start(self, rec: Running, handle: asyncio.Task[None]) -> None: ...
        def _forget(self, rec: Running) -> None: ...
        def _check_recycle(self) -> None: ...
        def _crash_on_bug(self, task: asyncio.Task[None]) -> None: ...
        async def _drained(self) -> bool: ...
        async def _write_progress(self, job: Job, pct: float, message: str) -> None: ...
        async def _write_log(self, job: Job, message: str) -> None: ...

    async def _claim_loop(self) -> None:
        woke_with_jobs = False
        while not self._stopping.is_set():
            # Quiet (engine/control.py): wait for resume or stop (a claim sent ahead starts first).
            if not self._claiming.is_set() and self._ahead is None:
                await self._claiming.wait()
                continue
            free = self.concurrency - len(self._active)
            # Outcomes not yet written hold claims back past `concurrency` of them: a worker
            # that dies re-runs at most that many ended jobs, besides those it was running.
            # A claim sent ahead is taken first: its jobs hold slots and are not started yet.
            if self._ahead is None and (free <= 0 or self._unflushed > self.concurrency):
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            # A claim on wake leaves the marker set while jobs remain (claim-12.lua), so the
            # next wait returns at once: a plain claim first would only come back empty. A
            # burst worker claims first all the same: it stops when a claim finds nothing.
            if self._ahead is not None or self.burst or self._lost or not woke_with_jobs:
                claimed, error = await self._claim_step(free)
                if error is not None:
                    await self._claim_retry.failed(error)
                    continue
                if claimed:
                    continue
                if self.burst and await self._drained():
                    break
            got = await self._wait_for_work(free)
            woke_with_jobs = bool(got)
            if got:  # admitted even when a stop came meanwhile: they are claimed (and begun)
                await self._start_claimed(got)
        if self._ahead is not None:  # sent before the stop: its jobs are claimed (and begun)
            await self._claim_step(0)
        if self._lost:  # once more on the way out (else their leases hand them back, as stalls)
            try:
                await self._disown()
            except RedisUnavailable as exc:
                log.warning("could not hand back lost claims worker=%s error=%r", self.id, exc)

    async def _claim_step(self, free: int) -> tuple[list[Running], Exception | None]:
        """Hand back lost claims, claim up to `free` jobs (or take the claim sent ahead) and
        start them; return them and the error that stopped the claim (None: it went through)."""
        ahead, self._ahead = self._ahead, None
        try:
            if ahead is not None:
                claimed, error = await ahead
            else:
                if self._lost:
                    await self._disown()
                claimed, error = await self._claim(free)
        except Exception as exc:
            return [], exc
        if error is None:
            self._claim_retry.ok()
            self._claim_ahead(len(claimed))
        await self._start_claimed(claimed)
        return claimed, error

    def _claim_ahead(self, got: int) -> None:
        """Send the next claim now, before the jobs just claimed run, when a full batch came
        and slots are still free: Redis runs it while this process runs them.

        Its jobs count against `concurrency` like any claim, so none waits for a slot. None is
        sent while a queue is marked lost: the next step hands those jobs back first.
        """
        more = self.concurrency - len(self._active)
        if (
            got >= self.settings.claim_batch
            and more > 0
            and self._unflushed <= self.concurrency
            and not self._lost
            and not self._stopping.is_set()
        ):
            loop = asyncio.get_running_loop()  # eager: the request is sent before this returns
            self._ahead = asyncio.Task(self._claim(more), loop=loop, eager_start=True)

    async def _start_claimed(self, claimed: list[Running]) -> None:
        if claimed:
            failpoints.hit("after_claim")
            await self._admit(claimed)
            await asyncio.sleep(0)  # let them start before the next claim is sent

    async def _disown(self) -> None:
        """Hand back the jobs claims (or begins) of this worker took whose replies were lost.

        The server may have run a call whose reply never came: the jobs it claimed sit in
        `started` under this worker's name with tokens the worker never saw (disown-4.lua).
        """
        for keys in list(self._lost):
            held = [r.job.token for r in self._active.values() if r.keys == keys]
            pending = (*self._outcomes, *self._writing)  # ended; outcomes not written yet
            held += [o.job.token for o in pending if o.job.queue == keys.queue]
            self._lost.discard(keys)  # a begin failing meanwhile marks the queue again
            try:
                ids = await self.scripts.disown(
                    keys,
                    events_maxlen=self.settings.events_emergency_maxlen,
                    worker_id=self.id,
                    held=[token for token in held if token],
                )
            except BaseException:
                self._lost.add(keys)
                raise
            if ids:
                log.warning(
                    "handed back jobs of lost claim replies worker=%s queue=%s jobs=%d",
                    self.id,
                    keys.queue,
                    len(ids),
                )

    async def _claim(self, free: int) -> tuple[list[Running], RedisUnavailable | None]:
        """Claim in each queue in turn; stop at a failure, keeping what earlier queues gave.

        A failed claim may still have run on the server: its queue is marked for `_disown`.
        """
        out: list[Running] = []
        for keys in self.queues:
            argv = self._claim_argv(keys, free, out)
            if argv is None:
                continue
            try:
                rows = claimed(await self.scripts.raw["claim"](keys, argv))
            except RedisUnavailable as exc:
                self._lost.add(keys)
                return out, exc
            out += self._running(keys, rows)
        return out, None

    def _claim_argv(self, keys: QueueKeys, free: int, out: list[Running]) -> list[Any] | None:
        """Return the ARGV of a claim in `keys` for the slots left, or None for no claim."""
        want = min(free - len(out), self.settings.claim_batch)
        if self.settings.max_jobs:  # recycling: never claim past max_jobs
            want = min(want, self.settings.max_jobs - self.claims)
        limit = self.queue_limits.get(keys.queue)
        if limit is not None:
            want = min(want, limit - sum(1 for r in self._active.values() if r.keys == keys))
        if want <= 0:
            return None
        return claim_argv(
            keys,
            events_maxlen=self.settings.events_emergency_maxlen,
            max_jobs=want,
            lease_ms=self.settings.lease_ms,
            worker_id=self.id,
            result_ttl_ms=self.settings.default_result_ttl_s * 1000,
            most_suspects=self._suspects_wanted(out),
            begin=True,
            build=self.versions.build_keys[keys],
            held=self.held,
        )

    def _running(self, keys: QueueKeys, rows: list[Claimed]) -> list[Running]:
        """Make claimed rows the worker's Running jobs (counted in `_active`)."""
        out: list[Running] = []
        for row in rows:
            size = len(row.args or "") + len(row.kwargs or "")
            poison = None
            if size > self.settings.max_payload_bytes:
                row = row._replace(args="[]", kwargs="{}")
                poison = f"payload of {size} bytes is over {self.settings.max_payload_bytes}"
            job = Job.from_claim(keys.queue, row)
            task = self.registry.get(job.task, job.version)
            opts = options_for(task, job) if task is not None else None
            ctx = JobContext(
                job,
                self.id,
                self._write_progress,
                asyncio.get_running_loop(),
                self.upkeep.parent_results,
                self._write_log,
            )
            rec = Running(job, keys, task, opts, ctx, poison=poison, begun=bool(row.begun))
            self._active[job.token or job.id] = rec
            out.append(rec)
        self.claims += len(rows)
        if rows and self.settings.max_jobs:
            self._check_recycle()
        return out

    async def _wait_for_work(self, free: int) -> list[Running]:
        """Wait for a queue's marker; with one queue on one node, claim in the same step.

        The claim rides behind BZPOPMIN on the blocking connection, and Redis runs it the moment
        the wait ends (a job came, or the timeout): a job reaches an idle worker in one round
        trip, not two. What it claims is run even if a stop came meanwhile.
        """
        try:
            if self._wake is not None:
                await self._wake.next(timeout=self.settings.idle_wait_s)
                return []
            keys = self.queues[0]
            argv = self._claim_argv(keys, free, []) if self._claim_on_wake else None
            if argv is None:
                markers = [k.marker for k in self.queues]
                await self.blocking.bzpopmin(markers, timeout=self.settings.idle_wait_s)
                return []
            try:
                async with self.blocking.pipeline(transaction=False) as pipe:
                    pipe.bzpopmin(keys.marker, timeout=self.settings.idle_wait_s)
                    self.scripts.raw["claim"].queue_in(pipe, keys, argv)
                    _, rows = await pipe.execute(raise_on_error=False)
            except RedisUnavailable:
                self._lost.add(keys)  # the claim may have run: its reply is what was lost
                raise
            if isinstance(rows, NoScriptError):
                return []  # nothing ran: the next claim loads the script
            if isinstance(rows, Exception):
                raise rows
            self._claim_retry.ok()
            return self._running(keys, claimed(rows))
        except Exception as exc:
            await self._claim_retry.failed(exc)
            return []

    def _suspects_wanted(self, claimed: list[Running]) -> int:
        """Return how many suspects to claim: one per idle isolation child (-1: any)."""
        if self.lane is None:
            return -1
        busy = sum(1 for r in self._active.values() if r.job.stalls > 0)
        return max(0, self.lane.size - busy)

    async def _admit(self, claimed: list[Running]) -> None:
        """Start what the claim began; begin what may start now; park jobs over their task's
        max_concurrent."""
        ready: list[Running] = []
        for rec in claimed:
            cap = rec.opts.max_concurrent if rec.opts else None
            if cap is not None and self._per_task[rec.job.task] >= cap:
                self._waiting[rec.job.task].append(rec)
                continue
            self._per_task[rec.job.task] += 1
            if rec.begun:
                self._start(rec)
            else:
                ready.append(rec)
        await self._begin_and_start(ready)

    async def _begin_and_start(self, ready: list[Running]) -> None:
        if not ready:
            return
        by_queue: dict[QueueKeys, list[Running]] = defaultdict(list)
        for rec in ready:
            by_queue[rec.keys].append(rec)
        for keys, recs in by_queue.items():
            jobs: list[BeginJob] = []
            for rec in recs:
                rec.isolated = rec.job.stalls > 0 and self.lane is not None and rec.poison is None
                jobs.append(BeginJob(rec.job.id, rec.job.token or "", rec.isolated))
            try:
                codes = await self.scripts.begin(keys, lease_ms=self.settings.lease_ms, jobs=jobs)
            except RedisUnavailable as exc:
                # Begun or not, the server may hold them: `_disown` hands them back.
                self._lost.add(keys)
                log.warning("begin failed worker=%s jobs=%d error=%r", self.id, len(recs), exc)
                codes = [Code.LEASE_LOST] * len(recs)
            for rec, code in zip(recs, codes, strict=True):
                if code < 0:
                    self.writer.count(Outcome(rec.job, Kind.FAILED), "begin", code)
                    self._forget(rec)
                    self._task_slot_free(rec.job.task)
                    continue
                rec.job.attempt = code
                self._start(rec)

    def _task_slot_free(self, task: str) -> None:
        """Give a job of `task` that ended (or never began) its max_concurrent slot's successor."""
        queue = self._waiting.get(task)
        if queue and not self._stopping.is_set():
            begin = asyncio.get_running_loop().create_task(self._begin_and_start([queue.popleft()]))
            begin.add_done_callback(self._crash_on_bug)
        else:
            self._per_task[task] -= 1

    def _start(self, rec: Running) -> None:
        """Run a begun job in a task of its own, started eagerly: its first step runs now.

        A job that never waits (a quick async task) ends inside this call and never goes
        through the event loop's queue; one that waits is scheduled like any other task.
        """
        failpoints.hit("after_begin")
        handle = asyncio.Task(self._run_one(rec), loop=asyncio.get_running_loop(), eager_start=True)
        rec.handle = handle
        if not handle.done():  # one that ended in its first step was not cancelled before it
            handle.add_done_callback(partial(self._cancelled_before_start, rec))
