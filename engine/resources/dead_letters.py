"""Dead letters: a queue's dead-letter queue listed, searched, scanned and resubmitted."""

from __future__ import annotations

from collections.abc import Iterable

from redis.asyncio import Redis

from ..fields import both, either
from ..job import Job
from ..seam.scripts import Scripts
from ..settings import EngineSettings
from .base import CHUNK, Resource, load_jobs
from .jobs import Jobs


class DeadLetters(Resource):
    # `list` comes last: the methods above name the builtin list in their signatures.
    """The dead-letter queue of every queue."""

    def __init__(
        self, settings: EngineSettings, redis: Redis, scripts: Scripts, jobs: Jobs
    ) -> None:
        super().__init__(settings, redis, scripts)
        self._jobs = jobs

    async def contains(self, queue: str, job_ids: Iterable[str]) -> set[str]:
        """Return the ids among `job_ids` that the dead-letter queue of `queue` holds."""
        ids, key = list(job_ids), self.keys(queue).dlq
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.zscore(key, job_id)
            scores = await pipe.execute()
        return {i for i, score in zip(ids, scores, strict=True) if score is not None}

    async def scan(self, queue: str, cursor: int = 0, count: int = CHUNK) -> tuple[int, list[str]]:
        """Return the next ZSCAN cursor over `queue`'s dead-letter queue and the ids of one step
        (0: done; an id may come twice, as ZSCAN may return it)."""
        at, page = await self.redis.zscan(self.keys(queue).dlq, cursor, count=count)
        return int(at), [str(job_id) for job_id, _ in page]

    async def resubmit(self, queue: str, task: str | None = None) -> int:
        """Resubmit every DLQ job of `queue`, or only those of `task`; return the count."""
        keys = self.keys(queue)
        total = 0
        cursor = 0
        while True:
            cursor, ids = await self.scan(queue, cursor)
            if task is not None and ids:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for job_id in ids:
                        pipe.hmget(keys.job(job_id), both("task"))
                    names = [either(row)[0] for row in await pipe.execute()]
                ids = [i for i, name in zip(ids, names, strict=True) if name == task]
            total += await self._jobs.resubmit(queue, ids)
            if cursor == 0:
                return total

    async def list(
        self,
        queue: str,
        offset: int = 0,
        limit: int = 100,
        task: str | None = None,
        version: int | None = None,
    ) -> list[Job]:
        """Return jobs in the DLQ of `queue`, oldest first: `limit` of them after `offset`,
        counting only those of `task` (and its `version`) when given."""
        keys = self.keys(queue)
        if task is None and version is None:
            ids: list[str] = await self.redis.zrange(keys.dlq, offset, offset + limit - 1)  # type: ignore[assignment]
            return await load_jobs(self.redis, keys, ids)
        found: list[Job] = []
        skip, start = offset, 0
        while len(found) < limit:  # a page of the DLQ at a time, its matches kept
            page: list[str] = await self.redis.zrange(keys.dlq, start, start + CHUNK - 1)  # type: ignore[assignment]
            if not page:
                break
            start += len(page)
            for job in await load_jobs(self.redis, keys, page):
                if (task is None or job.task == task) and (
                    version is None or job.version == version
                ):
                    if skip:
                        skip -= 1
                    elif len(found) < limit:
                        found.append(job)
        return found
