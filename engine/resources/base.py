"""What every resource holds: the settings, the connection and the typed scripts."""

from __future__ import annotations

from redis.asyncio import Redis

from ..job import Job
from ..keys import QueueKeys, queue_keys
from ..seam.scripts import Scripts
from ..settings import EngineSettings

# Most job ids one script call takes (cancel, purge, resubmit, run now).
CHUNK = 500


class Resource:
    """A part of the engine's Redis, reached through the client's connection."""

    def __init__(self, settings: EngineSettings, redis: Redis, scripts: Scripts) -> None:
        self.settings = settings
        self.redis = redis
        self.scripts = scripts

    def keys(self, queue: str) -> QueueKeys:
        """Return the keys of `queue`."""
        return queue_keys(self.settings.prefix, queue)


async def load_jobs(redis: Redis, keys: QueueKeys, ids: list[str]) -> list[Job]:
    """Return the jobs of `ids` Redis holds, in order (one round trip)."""
    async with redis.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.hgetall(keys.job(job_id))
        rows = await pipe.execute()
    return [Job.from_hash(row, i, keys.queue) for i, row in zip(ids, rows, strict=True) if row]
