"""SAQ worker settings and no-op task (`saq bench.peers.saq_tasks.settings`)."""

from __future__ import annotations

import os
from typing import Any

from redis.asyncio import Redis
from saq.queue.redis import RedisQueue

from bench import probe
from bench.peers import QUEUE

CONCURRENCY = 100


async def noop(ctx: dict[str, Any], *, t_enqueued: float) -> None:
    probe.hit(t_enqueued)


# redis-py 8 caps an asyncio pool at 100 connections by default and SAQ's worker holds one per
# concurrency slot (blocking BLMOVE) plus its upkeep: with the default pool it fails with
# MaxConnectionsError and re-runs jobs. Give it room.
POOL = 4 * CONCURRENCY
queue = RedisQueue(Redis.from_url(os.environ["BENCH_REDIS_URL"], max_connections=POOL), name=QUEUE)

settings = {"queue": queue, "functions": [noop], "concurrency": CONCURRENCY}
# SAQ's burst mode needs a positive dequeue timeout: it stops after one empty dequeue.
settings_burst = {**settings, "burst": True, "dequeue_timeout": 1.0}
