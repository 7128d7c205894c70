"""Schedules: the repeatables' due ticks and definitions the scheduler fires, what schedule
health reads of them and of their last ticks' jobs, and the queues a declaration names."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from redis.asyncio import Redis

from ...fields import both, either
from ...keys import QueueKeys, queues_key
from ...seam.scripts import Scripts
from ...settings import EngineSettings
from ...transport.cluster import is_cluster, node_time
from ...transport.connection import ms_from_time
from ..base import Resource

# What schedule health reads of one queue: its repeatables' definitions (name -> JSON), their
# next ticks (name -> ms) and their last ticks' job ids (name -> id).
Stored = tuple[dict[str, str], dict[str, int], dict[str, str]]


class Schedules(Resource):
    """The repeatables of any queue, as the scheduler, schedule health and declarations use
    them."""

    def __init__(self, settings: EngineSettings, redis: Redis, scripts: Scripts) -> None:
        super().__init__(settings, redis, scripts)
        self.cluster = is_cluster(redis)

    async def upcoming(self, keys: QueueKeys, last: int) -> tuple[int, list[tuple[str, float]]]:
        """Return the server time (ms) and the queue's next ticks of rank 0 to `last` (name, due
        ms), in one round trip (two on a cluster: it refuses TIME in a pipeline, so the queue's
        master is asked)."""
        upcoming: list[tuple[str, float]]
        if self.cluster:
            reply = await node_time(self.redis, keys.repeat_due)  # type: ignore[arg-type]
            upcoming = await self.redis.zrange(keys.repeat_due, 0, last, withscores=True)  # type: ignore[assignment]
        else:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.time()
                pipe.zrange(keys.repeat_due, 0, last, withscores=True)
                reply, upcoming = await pipe.execute()
        return ms_from_time(reply), upcoming

    async def definitions(self, keys: QueueKeys, names: list[str]) -> list[str | None]:
        """Return the stored definition (JSON) of each repeatable of `names`, None where gone."""
        raws: list[str | None] = await self.redis.hmget(keys.repeats, names)  # type: ignore[assignment]
        return raws

    async def set_aside(self, keys: QueueKeys, name: str) -> None:
        """Stop the ticks of repeatable `name` (its definition stays)."""
        await self.redis.zrem(keys.repeat_due, name)

    async def stored(self, queues: Sequence[str]) -> list[Stored]:
        """Return, per queue, its repeatables' definitions, next ticks and last ticks' job ids,
        in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for queue in queues:
                keys = self.keys(queue)
                pipe.hgetall(keys.repeats)
                pipe.zrange(keys.repeat_due, 0, -1, withscores=True)
                pipe.hgetall(keys.repeat_last)
            replies = await pipe.execute()
        out: list[Stored] = []
        for at in range(len(queues)):
            raw, due, last = replies[3 * at : 3 * at + 3]
            out.append((raw, {name: int(score) for name, score in due}, last))
        return out

    async def tick_jobs(
        self, ticks: Sequence[tuple[str, str | None, str]]
    ) -> list[tuple[str | None, str | None, str | None]]:
        """Return, per (queue, last tick's job id or None, the tick before's job id), the last
        job's state and `started_at_ms` and the job before's state, in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for queue, last_id, before_id in ticks:
                keys = QueueKeys(self.settings.prefix, queue)
                pipe.hmget(keys.job(last_id or "-"), both("state", "started_at_ms"))
                pipe.hmget(keys.job(before_id), both("state"))
            rows = [either(row) for row in await pipe.execute()]
        return [(rows[2 * at][0], rows[2 * at][1], rows[2 * at + 1][0]) for at in range(len(ticks))]

    async def note_queues(self, queues: Collection[str]) -> set[str]:
        """Add `queues` to the queues Redis knows; return every queue it knows."""
        key = queues_key(self.settings.prefix)
        if queues:
            await self.redis.sadd(key, *queues)
        known: set[str] = await self.redis.smembers(key)  # type: ignore[assignment]
        return known
