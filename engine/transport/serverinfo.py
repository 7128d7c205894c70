"""What the operator sees of the Redis server itself: memory used, its limit, uptime."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from .cluster import is_cluster


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """Redis memory and uptime (INFO memory, server); on a cluster, summed over its masters
    (memory) and the youngest master's uptime.

    `max_memory_bytes` is 0 when there is no limit (maxmemory 0): Redis grows until the host
    refuses it.
    """

    used_memory_bytes: int
    used_memory_human: str
    max_memory_bytes: int
    max_memory_human: str
    uptime_s: int
    version: str
    nodes: int

    def as_dict(self) -> dict[str, Any]:
        """Return it as JSON-ready values."""
        return asdict(self)


def _human(n: int) -> str:
    """Return a byte count as Redis words it (1.50M, 12.00K, 512B)."""
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"


async def server_info(redis: Redis) -> ServerInfo:
    """Return the memory, its limit and the uptime of the engine's Redis."""
    if is_cluster(redis):
        reply = await redis.info(target_nodes=RedisCluster.PRIMARIES)
        infos = list(reply.values()) if isinstance(reply, dict) else [reply]
        infos = [i for i in infos if isinstance(i, dict) and "used_memory" in i] or [reply]
    else:
        infos = [await redis.info()]
    used = sum(int(i.get("used_memory", 0)) for i in infos)
    limit = sum(int(i.get("maxmemory", 0)) for i in infos)
    if any(int(i.get("maxmemory", 0)) == 0 for i in infos):
        limit = 0  # a master without a limit: the whole has none
    return ServerInfo(
        used_memory_bytes=used,
        used_memory_human=_human(used),
        max_memory_bytes=limit,
        max_memory_human=_human(limit) if limit else "no limit",
        uptime_s=min(int(i.get("uptime_in_seconds", 0)) for i in infos),
        version=str(infos[0].get("redis_version", "")),
        nodes=len(infos),
    )
