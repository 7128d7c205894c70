"""Outages: the recent Redis outages health checkers recorded (`outages_key`, a ZSET of JSON
members by the server ms Redis was seen back) and the server's INFO `run_id`."""

from __future__ import annotations

from typing import Any

from redis.asyncio.cluster import RedisCluster

from ...keys import outages_key
from ...transport.cluster import is_cluster
from ..base import Resource


class Outages(Resource):
    """The recorded outages and the run id of the server."""

    async def recorded(self) -> list[str]:
        """Return the recorded outages (JSON members), oldest first."""
        raw: list[str] = await self.redis.zrange(outages_key(self.settings.prefix), 0, -1)  # type: ignore[assignment]
        return raw

    async def record(self, outage: str, back_ms: int, kept: int) -> None:
        """Record `outage` (JSON) seen ended at `back_ms`, keeping the last `kept`, in one round
        trip."""
        key = outages_key(self.settings.prefix)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(key, {outage: back_ms})
            pipe.zremrangebyrank(key, 0, -kept - 1)
            await pipe.execute()

    async def run_id(self) -> str:
        """Return the INFO `run_id` of the server (of every master of a cluster, joined): a new
        one after each restart or failover."""
        if is_cluster(self.redis):
            reply: Any = await self.redis.info("server", target_nodes=RedisCluster.PRIMARIES)
        else:
            reply = await self.redis.info("server")
        infos = (
            list(reply.values()) if isinstance(reply, dict) and "run_id" not in reply else [reply]
        )
        return ",".join(sorted(str(i.get("run_id", "")) for i in infos if isinstance(i, dict)))
