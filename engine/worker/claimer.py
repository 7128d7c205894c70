"""The worker's claim path: claim batches while slots are free, begin and start what they hold."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from ..dev import failpoints
from ..errors import Code, RedisUnavailable
from ..keys import QueueKeys
from ..resources.duties.claims import Claims
from ..resources.versions import Versions
from ..running.runner import Kind, Outcome
from ..seam.scripts import BeginJob, Claimed, claim_argv, claimed
from ..transport.cluster import Fanout, is_cluster
from ..transport.reconnect import Reconnect
from .book import Book
from .context import WorkerContext
from .lifecycle import State
from .unit import Attempts, RunningJob

log = logging.getLogger("engine.worker")


class Claimer:
    """Claim jobs from the worker's queues (in order) while its slots are free, and start them."""

    def __init__(
        self,
        ctx: WorkerContext,
        blocking: Redis,
        book: Book,
        attempts: Attempts,
        versions: Versions,
        *,
        burst: bool,
        on_claims: Callable[[], None],
        burst_scheduled: bool = True,
        queue_limits: Mapping[str, int] | None = None,
    ) -> None:
        self.settings = ctx.settings
        self.worker_id = ctx.worker_id
        self.scripts = ctx.scripts
        self.life = ctx.life
        self.blocking = blocking  # the client for waits on markers (with its claim on wake)
        # Its Redis besides the scripts: waits on markers, claims on wake, queue sizes.
        self.claim_io = Claims(ctx.settings, ctx.redis, ctx.scripts, blocking)
        self.book = book
        self.flusher = book.flusher
        self.attempts = attempts
        self.versions = versions
        # Tasks whose jobs may wait for a slot of their own (max_concurrent): claimed, not begun.
        limited = {t.name for t in attempts.registry if t.options.max_concurrent is not None}
        self.held = sorted(limited)
        self.burst = burst
        self.burst_scheduled = burst_scheduled  # a burst waits for scheduled jobs to come due
        self._on_claims = on_claims  # recycling counts claims
        self.queue_limits = dict(queue_limits or {})  # queue -> most claims held at once
        self.claims = 0  # jobs claimed so far (max_jobs)
        self.queues: list[QueueKeys] = []
        self._wake: Fanout | None = None
        self._claim_on_wake = False
        # Queues where a claim or begin failed: the server may hold jobs for this worker whose
        # tokens it never saw (`_disown` hands them back).
        self._lost: set[QueueKeys] = set()
        self._retry = Reconnect("claim")
        # A claim sent before the jobs of the last one ran (`_claim_ahead`), not read yet.
        self._ahead: asyncio.Task[tuple[list[RunningJob], RedisUnavailable | None]] | None = None
        book.begin = self._begin_parked

    def follow(self, queues: Sequence[QueueKeys]) -> Fanout | None:
        """Claim from `queues` from now on; return the old waits on markers, for the caller to
        close (None: there were none)."""
        old, self.queues = self._wake, list(queues)
        # On a cluster whose slots split the queues: one BZPOPMIN per slot (transport/cluster.py).
        markers = [k.marker for k in self.queues]
        self._wake = self.claim_io.waits(markers)
        # One queue on one node: an idle worker's claim rides behind its BZPOPMIN.
        self._claim_on_wake = len(self.queues) == 1 and not is_cluster(self.blocking)
        return old

    async def close(self) -> None:
        """Cancel the waits on markers still in flight."""
        if self._wake is not None:
            await self._wake.close()

    async def run(self) -> None:
        """Claim and start jobs until the worker stops (or, in burst mode, the queues empty)."""
        woke_with_jobs = False
        while not self.life.stopping.is_set():
            # Quiet (ops/control.py): wait for resume or stop (a claim sent ahead starts first).
            if self.life.state is State.QUIET and self._ahead is None:
                await self.life.wait_claiming()
                continue
            free = self.book.free()
            # Outcomes not yet written hold claims back past `concurrency` of them: a worker
            # that dies re-runs at most that many ended jobs, besides those it was running.
            # A claim sent ahead is taken first: its jobs hold slots and are not started yet.
            if self._ahead is None and (
                free <= 0 or self.flusher.unflushed > self.book.concurrency
            ):
                self.book.slot_free.clear()
                await self.life.wait_unless_stopped(self.book.slot_free)
                continue
            # A claim on wake leaves the marker set while jobs remain (claim-12.lua), so the
            # next wait returns at once: a plain claim first would only come back empty. A
            # burst worker claims first all the same: it stops when a claim finds nothing.
            if self._ahead is not None or self.burst or self._lost or not woke_with_jobs:
                got, error = await self._step(free)
                if error is not None:
                    await self._retry.failed(error)
                    continue
                if got:
                    continue
                if self.burst and await self._drained():
                    break
            got = await self._wait_for_work(free)
            woke_with_jobs = bool(got)
            if got:  # admitted even when a stop came meanwhile: they are claimed (and begun)
                await self._start_claimed(got)
        await self._leave()

    async def _leave(self) -> None:
        """Start the jobs of a claim sent before the stop; hand back lost claims once more (else
        their leases hand them back, as stalls)."""
        if self._ahead is not None:
            await self._step(0)
        if self._lost:
            try:
                await self._disown()
            except RedisUnavailable as exc:
                log.warning(
                    "could not hand back lost claims worker=%s error=%r", self.worker_id, exc
                )

    async def _step(self, free: int) -> tuple[list[RunningJob], Exception | None]:
        """Hand back lost claims, claim up to `free` jobs (or take the claim sent ahead) and
        start them; return them and the error that stopped the claim (None: it went through)."""
        ahead, self._ahead = self._ahead, None
        try:
            if ahead is not None:
                got, error = await ahead
            else:
                if self._lost:
                    await self._disown()
                got, error = await self.claim(free)
        except Exception as exc:
            return [], exc
        if error is None:
            self._retry.ok()
            self._claim_ahead(len(got))
        await self._start_claimed(got)
        return got, error

    def _claim_ahead(self, got: int) -> None:
        """Send the next claim now, before the jobs just claimed run, when a full batch came
        and slots are still free: Redis runs it while this process runs them.

        Its jobs count against `concurrency` like any claim, so none waits for a slot. None is
        sent while a queue is marked lost: the next step hands those jobs back first.
        """
        more = self.book.free()
        if (
            got >= self.settings.claim_batch
            and more > 0
            and self.flusher.unflushed <= self.book.concurrency
            and not self._lost
            and not self.life.stopping.is_set()
        ):
            loop = asyncio.get_running_loop()  # eager: the request is sent before this returns
            self._ahead = asyncio.Task(self.claim(more), loop=loop, eager_start=True)

    async def _start_claimed(self, got: list[RunningJob]) -> None:
        if got:
            failpoints.hit("after_claim")
            await self.admit(got)
            await asyncio.sleep(0)  # let them start before the next claim is sent

    async def _disown(self) -> None:
        """Hand back the jobs claims (or begins) of this worker took whose replies were lost.

        The server may have run a call whose reply never came: the jobs it claimed sit in
        `started` under this worker's name with tokens the worker never saw (disown-4.lua).
        """
        for keys in list(self._lost):
            held = [r.job.token for r in self.book.active.values() if r.keys == keys]
            # Ended, their outcomes not written yet.
            held += [o.job.token for o in self.flusher.pending() if o.job.queue == keys.queue]
            self._lost.discard(keys)  # a begin failing meanwhile marks the queue again
            try:
                ids = await self.scripts.disown(
                    keys,
                    events_maxlen=self.settings.stream.emergency_maxlen,
                    worker_id=self.worker_id,
                    held=[token for token in held if token],
                )
            except BaseException:
                self._lost.add(keys)
                raise
            if ids:
                log.warning(
                    "handed back jobs of lost claim replies worker=%s queue=%s jobs=%d",
                    self.worker_id,
                    keys.queue,
                    len(ids),
                )

    async def claim(self, free: int) -> tuple[list[RunningJob], RedisUnavailable | None]:
        """Claim in each queue in turn; stop at a failure, keeping what earlier queues gave.

        A failed claim may still have run on the server: its queue is marked for `_disown`.
        """
        out: list[RunningJob] = []
        for keys in self.queues:
            argv = self._argv(keys, free, out)
            if argv is None:
                continue
            try:
                rows = claimed(await self.scripts.raw["claim"](keys, argv))
            except RedisUnavailable as exc:
                self._lost.add(keys)
                return out, exc
            out += self._hold(keys, rows)
        return out, None

    def _argv(self, keys: QueueKeys, free: int, out: list[RunningJob]) -> list[Any] | None:
        """Return the ARGV of a claim in `keys` for the slots left, or None for no claim."""
        want = min(free - len(out), self.settings.claim_batch)
        if self.settings.recycle.max_jobs:  # recycling: never claim past max_jobs
            want = min(want, self.settings.recycle.max_jobs - self.claims)
        limit = self.queue_limits.get(keys.queue)
        if limit is not None:
            want = min(want, limit - self.book.in_queue(keys))
        if want <= 0:
            return None
        # QUEUE_TIMEOUT where this worker runs, for jobs whose producer stamped none on them.
        wait_s = self.settings.queue_timeout_for(keys.queue)
        return claim_argv(
            keys,
            events_maxlen=self.settings.stream.emergency_maxlen,
            max_jobs=want,
            lease_ms=self.settings.lease_ms,
            worker_id=self.worker_id,
            result_ttl_ms=self.settings.default_result_ttl_s * 1000,
            most_suspects=self.attempts.suspects_wanted(self.book.suspects),
            begin=True,
            build=self.versions.build_keys[keys],
            queue_timeout_ms=None if wait_s is None else int(wait_s * 1000),
            held=self.held,
        )

    def _hold(self, keys: QueueKeys, rows: list[Claimed]) -> list[RunningJob]:
        """Make claimed rows the worker's running jobs (held in the book)."""
        out = [self.attempts.prepare(keys, row, self.book) for row in rows]
        for rec in out:
            self.book.hold(rec)
        self.claims += len(rows)
        if rows and self.settings.recycle.max_jobs:
            self._on_claims()
        return out

    async def _wait_for_work(self, free: int) -> list[RunningJob]:
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
            await self.scripts.raw.hash_format()  # the claim below rides in a pipeline
            argv = self._argv(keys, free, []) if self._claim_on_wake else None
            if argv is None:
                markers = [k.marker for k in self.queues]
                await self.claim_io.wait(markers, self.settings.idle_wait_s)
                return []
            try:
                rows = await self.claim_io.wait_then_claim(keys, argv, self.settings.idle_wait_s)
            except RedisUnavailable:
                # The claim may have run: its reply was lost, or too few replicas acknowledged
                # it (its jobs would run again after a failover): `_disown` hands them back.
                self._lost.add(keys)
                raise
            if isinstance(rows, NoScriptError):
                return []  # nothing ran: the next claim loads the script
            if isinstance(rows, Exception):
                raise rows
            self._retry.ok()
            return self._hold(keys, claimed(rows))
        except Exception as exc:
            await self._retry.failed(exc)
            return []

    async def _drained(self) -> bool:
        """Return whether nothing is held, unwritten or left in the queues (burst mode)."""
        if self.book.active or self.flusher.unflushed:
            return False
        return not await self.claim_io.waiting(self.queues, self.burst_scheduled)

    async def admit(self, got: list[RunningJob]) -> None:
        """Start what the claim began; begin what may start now; park jobs over their task's
        max_concurrent."""
        ready: list[RunningJob] = []
        for rec in got:
            if not self.book.take_task_slot(rec):
                continue
            if rec.begun:
                self.attempts.start(rec)
            else:
                ready.append(rec)
        await self._begin_and_start(ready)

    def _begin_parked(self, rec: RunningJob) -> None:
        begin = asyncio.get_running_loop().create_task(self._begin_and_start([rec]))
        begin.add_done_callback(self.life.crash_on_bug)

    async def _begin_and_start(self, ready: list[RunningJob]) -> None:
        if not ready:
            return
        by_queue: dict[QueueKeys, list[RunningJob]] = defaultdict(list)
        for rec in ready:
            by_queue[rec.keys].append(rec)
        lane = self.attempts.lane
        for keys, recs in by_queue.items():
            jobs: list[BeginJob] = []
            for rec in recs:
                rec.isolated = rec.job.stalls > 0 and lane is not None and rec.poison is None
                jobs.append(BeginJob(rec.job.id, rec.job.token or "", rec.isolated))
            try:
                codes = await self.scripts.begin(keys, lease_ms=self.settings.lease_ms, jobs=jobs)
            except RedisUnavailable as exc:
                # Begun or not, the server may hold them: `_disown` hands them back.
                self._lost.add(keys)
                log.warning(
                    "begin failed worker=%s jobs=%d error=%r", self.worker_id, len(recs), exc
                )
                codes = [Code.LEASE_LOST] * len(recs)
            for rec, code in zip(recs, codes, strict=True):
                if code < 0:
                    self.flusher.writer.count(Outcome(rec.job, Kind.FAILED), "begin", code)
                    self.book.forget(rec)
                    self.book.release_task_slot(rec.job.task)
                    continue
                rec.job.attempt = code
                self.attempts.start(rec)
