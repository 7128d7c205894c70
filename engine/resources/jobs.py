"""Jobs: read one or many, wait for one, cancel, purge, resubmit, run now; the SCAN of a
queue's job hashes, the missed SET the history rebuilds from, and deduplication ids."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from ..errors import Code, JobNotFound
from ..fields import both, either
from ..job import Job
from ..ops.scanning import scan_job_ids
from ..result import Err, Ok, outcome
from ..seam.reads import find_job, wait_for_end
from ..seam.steps import drive_async
from .base import CHUNK, Resource


class Jobs(Resource):
    """Every job of the engine's Redis, found by id (and queue, when known)."""

    async def get(self, job_id: str, queue: str | None = None) -> Job:
        """Return the job with this id, from every known queue at once when `queue` is None."""
        steps = find_job(self.settings.prefix, job_id, queue)
        job: Job = await drive_async(steps, self.redis, self.scripts.raw)
        return job

    async def wait(self, job_id: str, timeout_s: float, queue: str | None = None) -> Job:
        """Wait until the job reaches a terminal state; raise JobTimeout after `timeout_s`."""
        steps = wait_for_end(self.settings.prefix, job_id, timeout_s, queue)
        job: Job = await drive_async(steps, self.redis, self.scripts.raw)
        return job

    async def outcome(self, job_id: str, timeout_s: float, queue: str | None = None) -> Ok | Err:
        """Wait until the job ends; return Ok(its result), or Err(how it ended otherwise).

        A job still not ended after `timeout_s` raises JobTimeout (a TimeoutError): it has no
        outcome yet, and may still complete.
        """
        return outcome(await self.wait(job_id, timeout_s, queue))

    async def result(self, job_id: str, timeout_s: float, queue: str | None = None) -> Any:
        """Wait until the job ends; return its result, or raise JobFailed (how it ended
        otherwise; JobTimeout after `timeout_s`)."""
        return (await self.outcome(job_id, timeout_s, queue)).unwrap()

    async def missing(self, jobs: Iterable[tuple[str, str]]) -> set[str]:
        """Return the ids of the (job id, queue) pairs whose job Redis does not hold."""
        pairs = list(jobs)
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id, queue in pairs:
                pipe.exists(self.keys(queue).job(job_id))
            found = await pipe.execute()
        return {job_id for (job_id, _), hit in zip(pairs, found, strict=True) if not hit}

    async def fields(
        self, queue: str, ids: Sequence[str], names: Sequence[str]
    ) -> list[dict[str, str]]:
        """Return fields `names` (Job attribute names) of each job of `queue` ({} for one Redis
        does not hold)."""
        stored = both(*names)
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(self.keys(queue).job(job_id), stored)
            rows = await pipe.execute()
        return [
            {n: v for n, v in zip(names, either(row), strict=True) if v is not None} for row in rows
        ]

    async def cancel(self, job_ids: Iterable[str], queue: str | None = None) -> dict[str, str]:
        """Cancel jobs; return id -> "cancelled", "cancelling" (running), "not_found" or "finished".

        A queued job is cancelled at once. A running one gets a durable mark; its worker stops it
        within about `heartbeat_interval_s` and it ends `cancelled`, never retried.
        """
        by_queue: dict[str, list[str]] = defaultdict(list)
        result: dict[str, str] = {}
        for job_id in job_ids:
            if queue is not None:
                by_queue[queue].append(job_id)
                continue
            try:
                by_queue[(await self.get(job_id)).queue].append(job_id)
            except JobNotFound:
                result[job_id] = "not_found"
        names = {0: "cancelled", 1: "cancelling", -1: "not_found", -3: "finished"}
        for name, queued in by_queue.items():
            coded = await self._in_chunks(self.scripts.cancel, name, queued)
            result.update((i, names[code]) for i, code in coded)
        return result

    async def purge(self, queue: str, job_ids: Iterable[str]) -> int:
        """Delete finished jobs from Redis (live ones are left alone); return how many."""
        ids = list(job_ids)
        purged = 0
        for start in range(0, len(ids), CHUNK):
            codes = await self.scripts.purge(self.keys(queue), job_ids=ids[start : start + CHUNK])
            purged += sum(1 for code in codes if code == Code.OK)
        return purged

    async def resubmit(self, queue: str, job_ids: Iterable[str]) -> int:
        """Resubmit finished jobs by id as new attempt series; return how many were resubmitted."""
        coded = await self._in_chunks(self.scripts.resubmit, queue, list(job_ids))
        return sum(1 for _, code in coded if code == Code.OK)

    async def _in_chunks(
        self, script: Callable[..., Awaitable[list[int]]], queue: str, ids: list[str]
    ) -> list[tuple[str, int]]:
        """Call `script` (cancel or resubmit: ids that end or restart a job, with the result
        ttl) on `ids` of `queue`, CHUNK ids a call; return each id with its code."""
        keys, out = self.keys(queue), list[tuple[str, int]]()
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start : start + CHUNK]
            codes = await script(
                keys,
                events_maxlen=self.settings.stream.emergency_maxlen,
                ttl_ms=self.settings.default_result_ttl_s * 1000,
                job_ids=chunk,
            )
            out.extend(zip(chunk, codes, strict=True))
        return out

    async def run_now(self, queue: str, job_ids: Iterable[str]) -> dict[str, str]:
        """Promote scheduled jobs (waiting for their run_at or a retry's backoff) to `submitted`
        now; return id -> "promoted", "not_found" or "not_scheduled"."""
        ids = list(job_ids)
        names = {Code.OK: "promoted", Code.NOT_FOUND: "not_found"}
        names[Code.WRONG_STATE] = "not_scheduled"
        result: dict[str, str] = {}
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start : start + CHUNK]
            done = await self.scripts.promote(
                self.keys(queue),
                events_maxlen=self.settings.stream.emergency_maxlen,
                max_jobs=len(chunk),
                job_ids=chunk,
            )
            result.update((i, names[Code(c)]) for i, c in zip(chunk, done.codes, strict=True))
        return result

    async def scan_ids(
        self, queue: str, cursor: int = 0, count: int = 1000
    ) -> tuple[int, list[str]]:
        """Return the next SCAN cursor over `queue`'s job hashes and the ids of one step (0:
        done); on a cluster, SCAN the one master holding the queue's slot."""
        return await scan_job_ids(self.redis, self.keys(queue), cursor, count)

    async def mark_missed(self, queue: str, job_ids: Sequence[str]) -> None:
        """Put jobs in `queue`'s missed SET: the history rebuilds their rows from their hashes."""
        if job_ids:
            await self.redis.sadd(self.keys(queue).missed, *job_ids)

    async def dedup_holder(self, queue: str, dedup_id: str) -> str | None:
        """Return the id of the job that holds deduplication id `dedup_id`, or None."""
        held = await self.redis.get(self.keys(queue).dedup(dedup_id))
        return None if held is None else str(held)

    async def free_dedup(self, queue: str, dedup_id: str) -> bool:
        """Free deduplication id `dedup_id` (the next job with it is submitted, whatever holds
        it now); return whether it was held."""
        return bool(await self.redis.delete(self.keys(queue).dedup(dedup_id)))
