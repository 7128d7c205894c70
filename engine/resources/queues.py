"""Queues: their names, counts, pause, rate limit, concurrency keys, scheduled and waiting
jobs, clearing a finished state, and the history gaps the cleaner counted."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError
from ..job import TERMINAL_STATES, Job
from ..keys import queues_key
from ..limits import rate_interval_ms
from ..ops import gaps
from . import clearing
from .base import CHUNK, Resource, load_jobs

_LIVE = ("submitted", "scheduled", "blocked", "started", "dlq")
_TERMINAL = sorted(TERMINAL_STATES)


class Queues(Resource):
    """Every queue of the engine's Redis."""

    async def __call__(self) -> list[str]:
        """Return the queue names (the old `Client.queues()`: `client.queues.names()` now)."""
        warnings.warn(
            "client.queues() is client.queues.names() now; the call goes in 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return await self.names()

    async def names(self) -> list[str]:
        """Return the names of every queue a client has submitted to."""
        names: set[str] = await self.redis.smembers(queues_key(self.settings.prefix))  # type: ignore[assignment]
        return sorted(names)

    async def counts(self, queue: str) -> dict[str, int]:
        """Return live counts per state (submitted includes waiting_turn: jobs waiting for their
        concurrency key's turn), DLQ size, and totals of terminal states reached."""
        return (await self.states([queue]))[0][1]

    async def states(self, queues: Sequence[str]) -> list[tuple[bool, dict[str, int]]]:
        """Return each queue's paused flag and its counts (see `counts`), in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for queue in queues:
                keys = self.keys(queue)
                pipe.hget(keys.meta, "paused")
                pipe.zcard(keys.submitted)
                pipe.zcard(keys.scheduled)
                pipe.scard(keys.blocked)
                pipe.zcard(keys.started)
                pipe.zcard(keys.dlq)
                pipe.hmget(keys.stats, ["waiting_turn", "waiting_version", *_TERMINAL])
            replies = await pipe.execute()
        states = []
        each = len(replies) // len(queues) if queues else 0  # replies per queue
        for at in range(0, len(replies), each or 1):
            paused, *sizes, (waiting_turn, waiting_version, *totals) = replies[at : at + each]
            out = dict(zip(_LIVE, sizes, strict=True))
            # Submitted jobs waiting for their concurrency key's turn, or for a worker with their
            # task version (claim-12.lua), are not in the ready ZSET.
            out["waiting_turn"] = int(waiting_turn or 0)
            out["waiting_version"] = int(waiting_version or 0)
            out["submitted"] += out["waiting_turn"] + out["waiting_version"]
            for state, total in zip(_TERMINAL, totals, strict=True):
                out[f"{state}_total"] = int(total or 0)
            states.append((paused == "1", out))
        return states

    async def pause(self, queue: str) -> None:
        """Pause a queue: no worker claims from it (its jobs stay put) until `resume`."""
        await self.redis.hset(self.keys(queue).meta, "paused", "1")

    async def resume(self, queue: str) -> None:
        """Resume a paused queue and wake idle workers."""
        keys = self.keys(queue)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hdel(keys.meta, "paused")
            pipe.zadd(keys.marker, {"0": 0})
            await pipe.execute()

    async def is_paused(self, queue: str) -> bool:
        """Tell whether a queue is paused."""
        return await self.redis.hget(self.keys(queue).meta, "paused") == "1"

    async def set_rate_limit(self, queue: str, rate: str | tuple[float, float] | None) -> None:
        """Limit starts from `queue` for all workers ("10/s", "600/m", (10, 1.0)); None lifts it."""
        keys = self.keys(queue)
        if rate is None:
            await self.redis.hdel(keys.meta, "rate_interval_ms", "tat")
        else:
            interval = rate_interval_ms(rate)
            await self.redis.hset(keys.meta, "rate_interval_ms", f"{interval:.3f}")

    async def rate_limit_ms(self, queue: str) -> float | None:
        """Return the interval between starts that `queue`'s rate limit sets, or None."""
        raw = await self.redis.hget(self.keys(queue).meta, "rate_interval_ms")
        return float(raw) if raw else None

    async def set_max_running(self, queue: str, most: int | None) -> None:
        """Cap `queue`'s running jobs at `most` for all workers together (claimed and not yet
        ended: claim-12.lua); None lifts the cap. ConfigError for a cap below 1."""
        keys = self.keys(queue)
        if most is None:
            await self.redis.hdel(keys.meta, "max_running")
            await self.redis.zadd(keys.marker, {"0": 0})  # workers a full queue put to sleep
            return
        if isinstance(most, bool) or not isinstance(most, int) or most < 1:
            raise ConfigError(f"max_running must be a whole number of at least 1, got {most!r}")
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(keys.meta, "max_running", str(most))
            pipe.zadd(keys.marker, {"0": 0})  # a higher cap: room for a sleeping worker
            await pipe.execute()

    async def max_running(self, queue: str) -> int | None:
        """Return `queue`'s cap on running jobs for all workers together, or None."""
        raw = await self.redis.hget(self.keys(queue).meta, "max_running")
        return int(raw) if raw else None

    async def concurrency_keys(self, queue: str, limit: int = 100) -> list[dict[str, Any]]:
        """Return the concurrency keys of `queue` with jobs waiting for their turn (at most
        `limit`, most waiting first): key, jobs waiting, jobs running under it (`active`)."""
        keys = self.keys(queue)
        waiting: dict[str, int] = {}
        async for field, count in self.redis.hscan_iter(keys.stats, match="turn|*", count=500):
            name, kind = keys.concurrency_key_of(field.partition("|")[2])
            if kind == "waiting" and int(count) > 0:
                waiting[name] = int(count)
        names = sorted(waiting, key=lambda n: (-waiting[n], n))[:limit]
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.scard(keys.concurrency(name)[0])
            active = await pipe.execute()
        return [
            {"key": n, "waiting": waiting[n], "active": int(a)}
            for n, a in zip(names, active, strict=True)
        ]

    async def scheduled(
        self, queue: str, offset: int = 0, limit: int = 100, retrying: bool | None = None
    ) -> list[Job]:
        """Return scheduled jobs of `queue`, next due first: `limit` after `offset`, counting
        only retries waiting for their backoff (`retrying` True: attempt >= 1) or only jobs
        never run yet (False) when given."""
        keys = self.keys(queue)
        found: list[Job] = []
        skip, start = offset, 0
        while len(found) < limit:
            page: list[str] = await self.redis.zrange(keys.scheduled, start, start + CHUNK - 1)  # type: ignore[assignment]
            if not page:
                break
            start += len(page)
            for job in await load_jobs(self.redis, keys, page):
                if retrying is not None and (job.attempt >= 1) != retrying:
                    continue
                if skip:
                    skip -= 1
                elif len(found) < limit:
                    found.append(job)
        return found

    async def due_by(self, queue: str, at_ms: int, limit: int = 1000) -> list[str]:
        """Return the ids of `queue`'s scheduled jobs due by `at_ms` (epoch ms: a run_at, a delay
        or a retry's backoff), soonest first, at most `limit`."""
        ids: list[str] = await self.redis.zrangebyscore(
            self.keys(queue).scheduled, "-inf", at_ms, start=0, num=limit
        )  # type: ignore[assignment]
        return ids

    async def waiting(self, queue: str, limit: int = 1000) -> list[Job]:
        """Return jobs of `queue` not started yet: submitted (next first), then scheduled."""
        keys = self.keys(queue)
        ready: list[str] = await self.redis.zrange(keys.submitted, 0, limit - 1)  # type: ignore[assignment]
        later: list[str] = await self.redis.zrange(keys.scheduled, 0, limit - 1)  # type: ignore[assignment]
        return (await load_jobs(self.redis, keys, [*ready, *later]))[:limit]

    async def clear_state(self, queue: str, state: str, dry_run: bool = False) -> int:
        """Delete `queue`'s finished jobs of `state` from Redis, one script call per SCAN step
        (engine/resources/clearing.py); return how many (with `dry_run`, how many there are)."""
        if dry_run:
            return await clearing.count_state(self, queue, state)
        return await clearing.clear_state(self, queue, state)

    async def history_gaps(self, queue: str) -> dict[str, int]:
        """Return the queue's history gaps, ever: event entries trimmed before the mirror read
        them, jobs of those rebuilt from their hashes, and jobs that could not be (trim-3.lua)."""
        values = await self.redis.hmget(self.keys(queue).stats, list(gaps.GAP_FIELDS))
        stats = dict(zip(gaps.GAP_FIELDS, values, strict=True))
        return {
            "entries": int(stats["gap_entries"] or 0),
            "rebuilt": int(stats["gap_rebuilt"] or 0),
            "lost": gaps.lost(stats),
        }
