"""SAQ worker settings and no-op task (`saq bench.peers.saq_tasks.settings`)."""

from __future__ import annotations

import os
from typing import Any

from saq import Queue

from bench import probe

CONCURRENCY = 100


async def noop(ctx: dict[str, Any], *, t_enqueued: float) -> None:
    probe.hit(t_enqueued)


queue = Queue.from_url(os.environ["BENCH_REDIS_URL"], name="bench")

settings = {"queue": queue, "functions": [noop], "concurrency": CONCURRENCY}
# SAQ's burst mode needs a positive dequeue timeout: it stops after one empty dequeue.
settings_burst = {**settings, "burst": True, "dequeue_timeout": 1.0}
