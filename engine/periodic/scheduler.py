"""The scheduler loop: fire repeatables, promote due jobs; safe with any number at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from redis.asyncio import Redis

from ..dev import failpoints
from ..errors import ConfigError, EngineError
from ..keys import QueueKeys
from ..producing.repeatable import Repeatable
from ..producing.submit import Tick, job_spec, submit
from ..resources.duties.schedules import Schedules
from ..seam.scripts import scripts_for
from ..settings import EngineSettings
from ..transport.reconnect import run_periodic

log = logging.getLogger("engine.scheduler")


class Scheduler:
    """Move scheduled jobs whose time has come (on Redis server time) to `submitted`."""

    def __init__(self, settings: EngineSettings, redis: Redis, queues: Sequence[str]) -> None:
        self.settings = settings
        self.redis = redis
        self.scripts = scripts_for(redis, settings)
        self.schedules = Schedules(settings, redis, self.scripts)
        self.queues = [QueueKeys(settings.prefix, q) for q in queues]

    async def promote(self, keys: QueueKeys) -> tuple[int, int]:
        """Promote one batch of due jobs; return (promoted, ms until the next is due or -1)."""
        done = await self.scripts.promote(
            keys,
            events_maxlen=self.settings.stream.emergency_maxlen,
            max_jobs=self.settings.promote_batch,
        )
        failpoints.hit("after_promote")
        return done.promoted, done.wait_ms

    async def fire(self, keys: QueueKeys, at_ms: int | None = None) -> int:
        """Submit the due ticks of the queue's repeatables; return ms until the next (-1: none).

        `at_ms` stands for Redis's clock (a test stepping through ticks): the ticks due by then
        fire, and each repeatable's next tick is the first after it.
        """
        now_ms, upcoming = await self.schedules.upcoming(keys, 100)
        now_ms = now_ms if at_ms is None else at_ms
        due: list[tuple[str, float]] = [(n, s) for n, s in upcoming if s <= now_ms][:100]
        if due:
            raws = await self.schedules.definitions(keys, [name for name, _ in due])
            fmt = await self.scripts.raw.hash_format()
            specs = []
            for (name, score), raw in zip(due, raws, strict=True):
                if raw is None:
                    continue  # removed meanwhile
                try:
                    rep = Repeatable.from_json(raw)
                    due_ms = int(score)
                    nxt = rep.next_after(now_ms) or -1
                    tick = Tick(name, due_ms, nxt, rep.skip_if_running, rep.repeat_limit or 0)
                    first, *rest = rep.jobs_for(due_ms)  # a flow: its other jobs ride the tick
                    limit = self.settings.max_payload_bytes
                    specs.append(job_spec(first, keys, limit, tick, fmt=fmt))
                    specs += [job_spec(job, keys, limit, ride=name, fmt=fmt) for job in rest]
                except (EngineError, TypeError, ValueError) as exc:
                    # Unreadable: stop its ticks (the definition stays to inspect), fire the rest.
                    log.error(
                        "bad repeatable set aside queue=%s name=%s error=%r", keys.queue, name, exc
                    )
                    await self.schedules.set_aside(keys, name)
            if specs:
                for done in (await submit(self.scripts, self.settings, keys, specs)).jobs:
                    if done.outcome == "skipped":
                        log.info(
                            "repeatable tick skipped: previous run still going job=%s", done.id
                        )
        if len(due) < len(upcoming):
            return max(0, int(upcoming[len(due)][1]) - now_ms)
        return 0 if due else -1

    async def fire_until(self, until_ms: int, most: int = 10_000) -> int:
        """Fire every tick due by `until_ms`, earliest first, each at its own time, as a scheduler
        running all along would (none skipped as late); return the ticks fired. Stops at `most`
        (ConfigError), so a short interval over a long span cannot run for ever."""
        fired = 0
        for keys in self.queues:
            while True:
                _, upcoming = await self.schedules.upcoming(keys, 99)
                due = [score for _, score in upcoming if score <= until_ms]
                if not due:
                    break
                if fired >= most:
                    raise ConfigError(f"more than {most} ticks due by {until_ms} ms")
                at_ms = int(due[0])  # the earliest: the ticks due then fire together
                fired += sum(1 for score in due if score <= at_ms)
                await self.fire(keys, at_ms=at_ms)
        return fired

    async def tick(self) -> float:
        """Fire due repeatables and promote due jobs; return seconds until the next is due."""
        sleep_s = self.settings.scheduler_interval_s
        for keys in self.queues:
            try:
                waits = [await self.fire(keys)]
            except EngineError as exc:  # repeatables must never hold up promotion
                log.error("repeatables failed queue=%s error=%r", keys.queue, exc)
                waits = []
            while True:
                promoted, wait_ms = await self.promote(keys)
                if promoted < self.settings.promote_batch:
                    break
            waits.append(wait_ms)
            for wait in waits:
                if wait >= 0:
                    sleep_s = min(sleep_s, wait / 1000)
        return max(sleep_s, 0.001)

    async def run(self, stopping: asyncio.Event) -> None:
        """Promote until `stopping` is set, sleeping until the next job is due."""
        await run_periodic("scheduler", self.tick, stopping)
