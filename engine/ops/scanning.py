"""SCAN a queue's job hashes, step by step: on a cluster, on the one master holding its slot."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from ..keys import QueueKeys


async def scan_job_ids(
    redis: Redis, keys: QueueKeys, cursor: int = 0, count: int = 1000
) -> tuple[int, list[str]]:
    """Return the next SCAN cursor over the queue's job hashes and the ids of one step (0:
    done)."""
    prefix, pattern = keys.job_prefix, keys.job_pattern
    if isinstance(redis, RedisCluster):  # the queue's slot lives on one master
        await redis.initialize()
        node = redis.get_node_from_key(prefix)
        reply = await redis.scan(cursor, match=pattern, count=count, target_nodes=node)
        # redis-py answers a SCAN on chosen nodes with the cursor per node: ({node: n}, keys).
        at, found = reply
        cursor = next(iter(at.values())) if isinstance(at, dict) else at
    else:
        cursor, found = await redis.scan(cursor, match=pattern, count=count)
    return int(cursor), [str(key)[len(prefix) :] for key in found]
