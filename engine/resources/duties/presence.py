"""Presence: what a worker writes about itself: its liveness key, its registry entry (with the
order waiting for it) and its claim fence in its queues' meta."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from redis.asyncio import Redis

from ... import serializer
from ...keys import QueueKeys, alive_key, control_key, stop_field, worker_key, workers_key
from ...settings import EngineSettings


class Presence:
    """One worker's marks in the engine's Redis, written through `redis` (the liveness thread
    has a connection of its own)."""

    def __init__(self, settings: EngineSettings, redis: Redis, worker_id: str) -> None:
        self.settings = settings
        self.redis = redis
        self.worker_id = worker_id

    async def renew_alive(self, now_ms: int, window_ms: int) -> None:
        """Set the liveness key for `window_ms` and the registry's last seen to `now_ms` (one
        round trip)."""
        prefix = self.settings.prefix
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(alive_key(prefix, self.worker_id), now_ms, px=window_ms)
            pipe.zadd(workers_key(prefix), {self.worker_id: now_ms})
            await pipe.execute()

    async def drop_alive(self) -> None:
        """Remove the liveness key."""
        await self.redis.delete(alive_key(self.settings.prefix, self.worker_id))

    async def register(
        self, info: Mapping[str, str], ttl_ms: int, now_ms: int, versions: Sequence[str]
    ) -> str | None:
        """Write the registry entry `info` (expiring after `ttl_ms`), seen at `now_ms`; return
        the order waiting for the worker ("quiet", "stop"; None: claim).

        One round trip, and a second to add `versions` when the entry is new (first renewal,
        or it lapsed).
        """
        prefix = self.settings.prefix
        key = worker_key(prefix, self.worker_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hexists(key, "versions")
            pipe.hset(key, mapping=dict(info))  # type: ignore[arg-type]
            pipe.pexpire(key, ttl_ms)
            pipe.zadd(workers_key(prefix), {self.worker_id: now_ms})
            pipe.get(control_key(prefix, self.worker_id))
            known, *_, order = await pipe.execute()
        if not known:
            await self.redis.hset(key, "versions", serializer.dumps(list(versions)).decode())
        return str(order) if order is not None else None

    async def deregister(self) -> None:
        """Remove the registry entry, its order and its place in the registry."""
        prefix = self.settings.prefix
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(worker_key(prefix, self.worker_id))
            pipe.delete(control_key(prefix, self.worker_id))
            pipe.zrem(workers_key(prefix), self.worker_id)
            await pipe.execute()

    async def fence(self, queues: Sequence[QueueKeys]) -> None:
        """Fence this worker's claims in `queues` (claim-12.lua reads the field; one round
        trip)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for keys in queues:
                pipe.hset(keys.meta, stop_field(self.worker_id), "1")
            await pipe.execute()

    async def unfence(self, queues: Sequence[QueueKeys]) -> None:
        """Lift this worker's claim fence from `queues` (one round trip)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for keys in queues:
                pipe.hdel(keys.meta, stop_field(self.worker_id))
            await pipe.execute()

    async def move_fence(
        self, lifted: Sequence[QueueKeys], fenced: Sequence[QueueKeys], wake: QueueKeys | None
    ) -> None:
        """Lift this worker's claim fence from `lifted`, fence `fenced`, and end the wait on
        the marker of `wake` (None: none), in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for keys in lifted:
                pipe.hdel(keys.meta, stop_field(self.worker_id))
            for keys in fenced:
                pipe.hset(keys.meta, stop_field(self.worker_id), "1")
            if wake is not None:
                pipe.zadd(wake.marker, {"0": 0})
            await pipe.execute()
