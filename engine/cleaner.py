"""The cleaner loop: expired leases (stalls), deadlines, retention and DLQ trimming.

Every step is one atomic script decided on Redis server time, so any number of workers can run
the cleaner at once without a leader.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from .connection import server_ms
from .keys import QueueKeys, workers_key
from .reconnect import run_periodic
from .scripts import Scripts
from .settings import EngineSettings

log = logging.getLogger("engine.cleaner")


@dataclass(slots=True)
class Sweep:
    """What one cleaner tick did."""

    released: int = 0
    stalled: int = 0
    expired: int = 0
    pruned: int = 0
    trimmed: int = 0


class Cleaner:
    """Recover jobs of dead workers, expire stale jobs, delete old results, trim the DLQ."""

    def __init__(self, settings: EngineSettings, redis: Redis, queues: Sequence[str]) -> None:
        self.settings = settings
        self.redis = redis
        self.scripts = Scripts(redis)
        self.queues = [QueueKeys(settings.prefix, q) for q in queues]

    async def sweep(self, keys: QueueKeys) -> Sweep:
        """Run every cleaning step once on one queue."""
        s = self.settings
        ttl_ms = s.default_result_ttl_s * 1000
        released, stalled, _ = await self.scripts.reap(
            keys,
            [keys.job_prefix, s.events_maxlen, s.cleaner_batch, ttl_ms],
        )
        expired = await self.scripts.expire(
            keys,
            [keys.job_prefix, s.events_maxlen, s.cleaner_batch, ttl_ms],
        )
        pruned, trimmed = await self.scripts.prune(
            keys,
            [keys.job_prefix, s.cleaner_batch, s.dlq_max_age_s * 1000, s.dlq_max_len],
        )
        return Sweep(released, stalled, expired, pruned, trimmed)

    async def tick(self) -> Sweep:
        """Sweep every queue; forget workers that stopped renewing their registry entry."""
        total = Sweep()
        for keys in self.queues:
            one = await self.sweep(keys)
            for name in total.__slots__:
                setattr(total, name, getattr(total, name) + getattr(one, name))
        cutoff_ms = await server_ms(self.redis) - int(self.settings.heartbeat_interval_s * 1000 * 6)
        await self.redis.zremrangebyscore(workers_key(self.settings.prefix), "-inf", cutoff_ms)
        if total.released or total.stalled or total.expired:
            log.info(
                "cleaner released=%d stalled=%d expired=%d pruned=%d trimmed=%d",
                total.released,
                total.stalled,
                total.expired,
                total.pruned,
                total.trimmed,
            )
        return total

    async def run(self, stopping: asyncio.Event) -> None:
        """Tick every `cleaner_interval_s` until `stopping` is set; Redis errors are retried."""

        async def step() -> float:
            await self.tick()
            return self.settings.cleaner_interval_s

        await run_periodic("cleaner", step, stopping)
