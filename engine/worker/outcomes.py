"""Write job outcomes to Redis in batches: completions in one script call per queue."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable

from .. import serializer
from ..dev import failpoints
from ..errors import Code, ReplicaAckTimeout
from ..job import Job
from ..keys import QueueKeys, queue_keys
from ..running.runner import Kind, Outcome
from ..seam.scripts import CompleteJob
from .context import WorkerContext

log = logging.getLogger("engine.worker")

# The written outcomes a worker's registry entry counts per queue (upkeep.register): a job
# completed, or an attempt that ended in an error (retried or not).
TALLIED = {
    "completed": "completed",
    "retried": "failed",
    "failed": "failed",
    "stalled": "failed",
    "stall_recovered": "failed",
    "dropped": "failed",
}


class OutcomeWriter:
    """Turn outcomes into fenced script calls; count what was refused."""

    def __init__(self, ctx: WorkerContext, counters: dict[str, int]) -> None:
        self.settings = ctx.settings
        self.scripts = ctx.scripts
        self.worker_id = ctx.worker_id
        self.counters = counters
        # queue -> {"completed": n, "failed": n}, since the worker started (TALLIED).
        self.tallies: dict[str, dict[str, int]] = {}

    async def write(self, batch: list[Outcome]) -> tuple[list[Outcome], BaseException | None]:
        """Write every outcome of `batch`; return those not written and the first error."""
        by_queue: dict[str, list[Outcome]] = defaultdict(list)
        for outcome in batch:
            by_queue[outcome.job.queue].append(outcome)
        calls: list[Awaitable[None]] = []
        groups: list[list[Outcome]] = []
        for queue, outcomes in by_queue.items():
            keys = queue_keys(self.settings.prefix, queue)  # made once a queue
            done: list[Outcome] = []
            others: list[Outcome] = []
            for o in outcomes:
                (done if o.kind == Kind.COMPLETE else others).append(o)
            if done:
                failpoints.hit("after_return")
                calls.append(self._complete(keys, done))
                groups.append(done)
            for o in others:
                calls.append(self._one(keys, o))
                groups.append([o])
        if len(calls) == 1:  # the usual batch: no task for it, nor a turn of the loop
            results = [await _caught(calls[0])]
        else:
            results = await asyncio.gather(*calls, return_exceptions=True)
        unwritten: list[Outcome] = []
        error: BaseException | None = None
        for group, result in zip(groups, results, strict=True):
            if isinstance(result, BaseException):
                unwritten += group
                error = error or result
        return unwritten, error

    async def _complete(self, keys: QueueKeys, outcomes: list[Outcome]) -> None:
        jobs = [
            CompleteJob(o.job.id, o.job.token or "", o.result, o.result_ttl_s * 1000)
            for o in outcomes
        ]
        try:
            codes = await self.scripts.complete(
                keys,
                events_maxlen=self.settings.stream.emergency_maxlen,
                worker_id=self.worker_id,
                jobs=jobs,
            )
        except ReplicaAckTimeout as exc:
            if isinstance(exc.reply, list):  # made on the master: the rewrite will find it done
                for o, code in zip(outcomes, exc.reply, strict=True):
                    o.unacked_code = o.unacked_code if code < 0 else int(code)
            raise
        written = 0  # counted at once: one tally per batch, not per job
        for o, code in zip(outcomes, codes, strict=True):
            if code >= 0:
                written += 1
            else:
                self.count(o, "completed", settled(o, code))
        if written:
            self._tally(keys.queue, "completed", written)

    async def _one(self, keys: QueueKeys, o: Outcome) -> None:
        try:
            await self._one_write(keys, o)
        except ReplicaAckTimeout as exc:
            if isinstance(exc.reply, int) and exc.reply >= 0:
                o.unacked_code = o.unacked_code if o.unacked_code is not None else exc.reply
            raise

    async def _one_write(self, keys: QueueKeys, o: Outcome) -> None:
        error = o.error or {}
        err = serializer.dumps(error)
        short = f"{error.get('type', '')}: {error.get('message', '')}"[:200]
        maxlen, me, job_id = self.settings.stream.emergency_maxlen, self.worker_id, o.job.id
        token = o.job.token or ""
        ttl_ms = o.result_ttl_s * 1000
        if o.kind == Kind.RETRY:
            failpoints.hit("before_retry")
            delay_ms = None if o.delay_s is None else int(o.delay_s * 1000)
            code = await self.scripts.retry(
                keys,
                events_maxlen=maxlen,
                worker_id=me,
                job_id=job_id,
                token=token,
                delay_ms=delay_ms,
                error_json=err,
                short_error=short,
                ttl_ms=ttl_ms,
            )
            code = settled(o, code)
            self.count(o, "cancelled" if code == 1 else "retried", 0 if code == 1 else code)
        elif o.kind == Kind.STALL:
            code = await self.scripts.stall(
                keys,
                events_maxlen=maxlen,
                worker_id=me,
                job_id=job_id,
                token=token,
                error_json=err,
                short_reason=short,
                ttl_ms=ttl_ms,
            )
            code = settled(o, code)
            self.count(o, "stalled" if code == 1 else "stall_recovered", min(code, 0))
        elif o.kind == Kind.RELEASE:
            code = await self.scripts.release(
                keys,
                events_maxlen=maxlen,
                worker_id=me,
                job_id=job_id,
                token=token,
                reason=short or "handed back",
            )
            self.count(o, "released", settled(o, code))
        else:
            failpoints.hit("before_dead")
            code = await self.scripts.fail(
                keys,
                events_maxlen=maxlen,
                worker_id=me,
                job_id=job_id,
                token=token,
                state=o.kind,
                error_json=err,
                short_error=short,
                ttl_ms=ttl_ms,
            )
            self.count(o, o.kind, settled(o, code))

    def side_code(self, job: Job, name: str, code: int) -> None:
        """Count a refused progress or log write (SideWrites tells every write's code)."""
        if code < 0:
            self.count(Outcome(job, Kind.FAILED), name, code)

    def count(self, o: Outcome, name: str, code: int) -> None:
        """Count a written outcome, or a refused write (lease lost) with a log line."""
        if code >= 0:
            self._tally(o.job.queue, name, 1)
        elif code == Code.LEASE_LOST:
            self.counters["lease_lost"] += 1
            log.warning("lease lost job=%s worker=%s write=%s", o.job.id, self.worker_id, name)
        else:
            self.counters["write_refused"] += 1
            log.warning(
                "write refused job=%s worker=%s write=%s code=%d",
                o.job.id,
                self.worker_id,
                name,
                code,
            )

    def _tally(self, queue: str, name: str, n: int) -> None:
        """Count `n` written outcomes `name` of `queue`."""
        self.counters[name] += n
        if (tally := TALLIED.get(name)) is not None:
            per_queue = self.tallies.setdefault(queue, {"completed": 0, "failed": 0})
            per_queue[tally] += n


async def _caught(call: Awaitable[None]) -> BaseException | None:
    """Await `call`; return what it raised (as gather(return_exceptions=True) would), except a
    cancellation of the task awaiting it, which goes on."""
    try:
        await call
    except asyncio.CancelledError as exc:
        me = asyncio.current_task()
        if me is not None and me.cancelling():
            raise
        return exc
    except Exception as exc:
        return exc
    return None


def settled(o: Outcome, code: int) -> int:
    """Return the code a write of `o` counts with: a refusal of a write the master had made
    already, unacknowledged by replicas (replica_acks), is that earlier write's code."""
    if code < 0 and o.unacked_code is not None:
        log.info("outcome acknowledged on a rewrite job=%s code=%d", o.job.id, code)
        return o.unacked_code
    return code
