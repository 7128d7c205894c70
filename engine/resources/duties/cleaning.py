"""Cleaning: the registered workers whose liveness key lapsed, and forgetting those gone long
enough (the cleaner's own steps are scripts: reap, expire, prune, unserved, trim)."""

from __future__ import annotations

from ...keys import alive_key, workers_key
from ..base import Resource


class Cleaning(Resource):
    """The worker registry as the cleaner reads and trims it."""

    async def lapsed_workers(self) -> list[str]:
        """Return the registered workers whose liveness key lapsed."""
        prefix = self.settings.prefix
        ids: list[str] = await self.redis.zrange(workers_key(prefix), 0, -1)  # type: ignore[assignment]
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in ids:
                pipe.exists(alive_key(prefix, worker_id))
            alive = await pipe.execute()
        return [worker_id for worker_id, n in zip(ids, alive, strict=True) if not n]

    async def forget_workers(self, before_ms: int) -> None:
        """Drop from the registry the workers last seen before `before_ms` (server ms)."""
        await self.redis.zremrangebyscore(workers_key(self.settings.prefix), "-inf", before_ms)
