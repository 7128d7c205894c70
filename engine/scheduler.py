"""The scheduler loop: promote due scheduled jobs; safe with any number running at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from redis.asyncio import Redis

from . import failpoints
from .connection import CONNECTION_ERRORS
from .keys import QueueKeys
from .reconnect import Reconnect
from .scripts import Scripts
from .settings import EngineSettings

log = logging.getLogger("engine.scheduler")


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
            [keys.scheduled, keys.submitted, keys.events, keys.marker, keys.seq],
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
        """Tick until `stopping` is set; Redis errors are logged and retried."""
        retry = Reconnect("scheduler")
        while not stopping.is_set():
            try:
                sleep_s = await self.tick()
                retry.ok()
            except CONNECTION_ERRORS as exc:
                await retry.failed(exc)
                continue
            except Exception:
                log.exception("tick failed loop=scheduler; going on")
                await asyncio.sleep(1.0)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=sleep_s)
