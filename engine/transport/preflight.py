"""Start-up checks of the Redis server a worker uses: eviction policy and persistence."""

from __future__ import annotations

import logging

from redis.asyncio import Redis
from redis.exceptions import NoPermissionError, ResponseError

log = logging.getLogger("engine.preflight")


async def check_redis(redis: Redis) -> list[str]:
    """Return (and log) warnings about eviction and persistence; ACL refusals only warn."""
    warnings: list[str] = []
    try:
        policy = (await redis.config_get("maxmemory-policy")).get("maxmemory-policy")
        if policy != "noeviction":
            warnings.append(f"maxmemory-policy is {policy!r}: Redis may evict jobs; use noeviction")
        config = await redis.config_get("save") | await redis.config_get("appendonly")
        if not config.get("save") and config.get("appendonly") != "yes":
            warnings.append("persistence is off (no RDB save, no AOF): a restart loses every job")
    except (NoPermissionError, ResponseError) as exc:
        warnings.append(
            f"cannot read CONFIG/INFO ({exc}); skipping eviction and persistence checks"
        )
    for text in warnings:
        log.warning("redis check: %s", text)
    return warnings
