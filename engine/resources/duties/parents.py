"""Parents: the results and errors of a running job's parents, read through its worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from ... import serializer
from ...fields import both, either
from ...keys import QueueKeys
from ...settings import EngineSettings


class Parents:
    """The parents of the jobs a worker runs (a flow's), read from the engine's Redis."""

    def __init__(self, settings: EngineSettings, redis: Redis) -> None:
        self.settings = settings
        self.redis = redis

    async def results(self, queue: str, parents: Sequence[str]) -> dict[str, Any]:
        """Return the result of each of `parents` (jobs of `queue`), by id (None when it has
        none; one round trip)."""
        keys = QueueKeys(self.settings.prefix, queue)
        async with self.redis.pipeline(transaction=False) as pipe:
            for parent in parents:
                pipe.hmget(keys.job(parent), both("result"))
            raw = [either(row)[0] for row in await pipe.execute()]
        return {
            parent: None if value is None else serializer.loads(value)
            for parent, value in zip(parents, raw, strict=True)
        }

    async def errors(self, queue: str, parents: Sequence[str]) -> dict[str, dict[str, Any] | None]:
        """Return the last error of each of `parents` (jobs of `queue`) that ended without
        completing, by id (None for one that completed, or has no error; one round trip)."""
        keys = QueueKeys(self.settings.prefix, queue)
        async with self.redis.pipeline(transaction=False) as pipe:
            for parent in parents:
                pipe.hmget(keys.job(parent), both("state", "errors"))
            rows = [either(row) for row in await pipe.execute()]
        out: dict[str, dict[str, Any] | None] = {}
        for parent, (state, errors) in zip(parents, rows, strict=True):
            found = serializer.loads(errors) if errors and state != "completed" else None
            out[parent] = found[-1] if isinstance(found, list) and found else None
        return out
