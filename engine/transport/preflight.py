"""Start-up checks of the Redis server a worker uses: eviction policy, persistence, replicas."""

from __future__ import annotations

import logging

from redis.asyncio import Redis
from redis.exceptions import NoPermissionError, ResponseError

from .cluster import is_cluster

log = logging.getLogger("engine.preflight")


async def check_redis(redis: Redis, replica_acks: int = 0) -> list[str]:
    """Return (and log) warnings about eviction, persistence and, with `replica_acks`, a master
    with fewer replicas connected (each write would wait out its timeout); ACL refusals only
    warn."""
    warnings: list[str] = []
    if replica_acks and not is_cluster(redis):
        try:
            replicas = int((await redis.info("replication")).get("connected_slaves", 0))
        except (NoPermissionError, ResponseError):
            replicas = replica_acks  # cannot tell: no warning
        if replicas < replica_acks:
            warnings.append(
                f"replica_acks is {replica_acks} but {replicas} replicas are connected: every "
                "write will wait replica_ack_timeout_ms and raise ReplicaAckTimeout"
            )
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
