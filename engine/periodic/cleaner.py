"""The cleaner loop: expired leases (stalls), deadlines, retention, DLQ and event trimming.

Every step is one atomic script decided on Redis server time, so any number of workers can run
the cleaner at once without a leader.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis

from ..dev import failpoints
from ..keys import QueueKeys
from ..resources.duties.cleaning import Cleaning
from ..resources.duties.feed import live_groups
from ..seam.scripts import scripts_for
from ..settings import EngineSettings
from ..transport.connection import server_ms
from ..transport.reconnect import run_periodic

log = logging.getLogger("engine.cleaner")
# Most entries one trim call removes before the mirror's group read them (trim-3.lua).
TRIM_PAST_BATCH = 10_000


class LivenessView(Protocol):
    """What a cleaner reads of its worker's liveness (engine/worker/liveness.py's Liveness)."""

    def steady_s(self) -> float | None: ...


@dataclass(slots=True)
class Sweep:
    """What one cleaner tick did."""

    released: int = 0
    stalled: int = 0
    expired: int = 0
    trimmed: int = 0
    # Event entries trimmed before the mirror's group read them (the hard cap was reached).
    gap: int = 0
    dropped: int = 0  # set aside for a task version no worker served for too long


class Cleaner:
    """Recover jobs of dead workers, expire stale jobs, trim the DLQ."""

    def __init__(
        self,
        settings: EngineSettings,
        redis: Redis,
        queues: Sequence[str],
        liveness: LivenessView | None = None,
    ) -> None:
        self.settings = settings
        # The liveness of the worker this cleaner runs in. While its renewals fail (Redis full,
        # read-only), everyone's may: no lapse proves a death until they have succeeded for a
        # whole window again, long enough for every live worker to renew its own key.
        self.liveness = liveness
        self.redis = redis
        self.scripts = scripts_for(redis, settings)
        self.cleaning = Cleaning(settings, redis, self.scripts)
        self.queues = [QueueKeys(settings.prefix, q) for q in queues]
        # Since when this cleaner has reached Redis without a failure (None: it just failed).
        # After an outage every worker's liveness key may have lapsed while they were all cut
        # off too: dead workers count only once the cleaner has been connected a whole window.
        self._ok_since: float | None = None
        # This cleaner failed since it last judged leases. Leases lapse during an outage while
        # their live workers cannot renew them (writes refused, a failover): none is judged
        # again until the cleaner has reached Redis for a whole lease, long enough for every
        # live worker to renew its own, or to write the outcomes it holds.
        self._saw_outage = False

    async def dead_workers(self) -> list[str]:
        """Return the registered workers whose liveness key lapsed.

        None while this cleaner's own worker has not renewed its key without a failure for a
        whole window: a lapse then may be Redis refusing writes, not a death.
        """
        if self.liveness is not None:
            steady_s = self.liveness.steady_s()
            if steady_s is None or steady_s < self.settings.liveness_window_s:
                return []
        return await self.cleaning.lapsed_workers()

    async def sweep(self, keys: QueueKeys, dead: Sequence[str] = (), reap: bool = True) -> Sweep:
        """Run every cleaning step once on one queue; `dead` workers' jobs are handed back, and
        with `reap` jobs whose lease expired."""
        s = self.settings
        ttl_ms = s.default_result_ttl_s * 1000
        released = stalled = 0
        if reap:
            reaped = await self.scripts.reap(
                keys,
                events_maxlen=s.stream.emergency_maxlen,
                max_jobs=s.cleaner.batch,
                ttl_ms=ttl_ms,
                dead_workers=dead,
            )
            released, stalled = reaped.released, reaped.stalled
        expired = await self.scripts.expire(
            keys, events_maxlen=s.stream.emergency_maxlen, max_jobs=s.cleaner.batch, ttl_ms=ttl_ms
        )
        trimmed = await self.scripts.prune(
            keys,
            max_jobs=s.cleaner.batch,
            dlq_max_age_ms=s.cleaner.dlq_max_age_s * 1000,
            dlq_max_len=s.cleaner.dlq_max_len,
        )
        dropped = await self.scripts.unserved(
            keys,
            events_maxlen=s.stream.emergency_maxlen,
            ttl_ms=ttl_ms,
            drop_after_ms=int(s.cleaner.unserved_drop_after_s * 1000),
            max_jobs=s.cleaner.batch,
        )
        gap = await self.trim_events(keys)
        return Sweep(released, stalled, expired, trimmed, gap, dropped)

    async def trim_events(self, keys: QueueKeys) -> int:
        """Trim the event stream below what the mirror and every live group (the transition
        hooks') acknowledged, and to the hard cap.

        Return how many entries went before the mirror's group read them (their jobs are
        recorded in the queue's missed SET for the mirror to rebuild); each call trims at most
        TRIM_PAST_BATCH of those, so Redis is never busy for long.
        """
        s = self.settings
        gap = 0
        holding = [g for g in await live_groups(self.redis, s.prefix) if g != s.stream.group]
        while True:
            done = await self.scripts.trim(
                keys,
                hard_cap=s.stream.maxlen,
                max_entries=TRIM_PAST_BATCH,
                max_missed=max(1, s.stream.maxlen // 3),
                group=s.stream.group,
                max_entries_kept=s.stream.kept_without_group,
                holding=holding,
            )
            gap += done.past_group
            if done.past_group < TRIM_PAST_BATCH:
                break
        if gap:
            log.error(
                "event stream trimmed past the group queue=%s group=%s entries=%d hard_cap=%d",
                keys.queue,
                s.stream.group,
                gap,
                s.stream.maxlen,
            )
        return gap

    async def tick(self) -> Sweep:
        """Sweep every queue; forget dead workers once their leases have run out too. After
        an outage it saw, judge leases only once it has reached Redis for a whole lease."""
        total = Sweep()
        now = time.monotonic()
        self._ok_since = self._ok_since or now
        steady_s = now - self._ok_since
        trusted = steady_s >= self.settings.liveness_window_s
        dead = await self.dead_workers() if trusted else []
        reap = not self._saw_outage or steady_s >= self.settings.lease_ms / 1000
        self._saw_outage = not reap
        failpoints.bug("bug_in_cleaner")
        for keys in self.queues:
            one = await self.sweep(keys, dead, reap)
            for name in total.__slots__:
                setattr(total, name, getattr(total, name) + getattr(one, name))
        # Dead workers stay listed until every lease they held expired, so that cleaners of
        # every queue see them dead.
        forget_ms = self.settings.lease_ms + int(self.settings.liveness_window_s * 1000)
        cutoff_ms = await server_ms(self.redis) - forget_ms
        await self.cleaning.forget_workers(cutoff_ms)
        if total.released or total.stalled or total.expired or total.dropped:
            log.info(
                "cleaner released=%d stalled=%d expired=%d trimmed=%d dropped=%d",
                total.released,
                total.stalled,
                total.expired,
                total.trimmed,
                total.dropped,
            )
        return total

    async def run(self, stopping: asyncio.Event) -> None:
        """Tick every `cleaner_interval_s` until `stopping` is set; Redis errors are retried."""

        async def step() -> float:
            try:
                await self.tick()
            except Exception:
                self._ok_since, self._saw_outage = None, True
                raise
            return self.settings.cleaner.interval_s

        await run_periodic("cleaner", step, stopping)
