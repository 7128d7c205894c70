"""The scheduler loop: promote due scheduled jobs; safe with any number running at once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from redis.asyncio import Redis

from . import failpoints
from .keys import QueueKeys
from .reconnect import run_periodic
from .scripts import Scripts
from .settings import EngineSettings


class Scheduler:
    """Move scheduled jobs whose time has come (on Redis server time) to `submitted`."""

    def __init__(self, settings: EngineSettings, redis: Redis, queues: Sequence[str]) -> None:
        self.settings = settings
        self.redis = redis
        self.scripts = Scripts(redis)
        self.queues = [QueueKeys(settings.prefix, q) for q in queues]

    async def promote(self, keys: QueueKeys) -> tuple[int, int]:
        """Promote one batch of due jobs; return (promoted, ms until the next is due or -1)."""
        promoted, wait_ms = await self.scripts.promote(
            keys,
            [keys.job_prefix, self.settings.events_maxlen, self.settings.promote_batch],
        )
        failpoints.hit("after_promote")
        return int(promoted), int(wait_ms)

    async def tick(self) -> float:
        """Promote every due job of every queue; return seconds until the next one is due."""
        sleep_s = self.settings.scheduler_interval_s
        for keys in self.queues:
            while True:
                promoted, wait_ms = await self.promote(keys)
                if promoted < self.settings.promote_batch:
                    break
            if wait_ms >= 0:
                sleep_s = min(sleep_s, wait_ms / 1000)
        return max(sleep_s, 0.001)

    async def run(self, stopping: asyncio.Event) -> None:
        """Promote until `stopping` is set, sleeping until the next job is due."""
        await run_periodic("scheduler", self.tick, stopping)
