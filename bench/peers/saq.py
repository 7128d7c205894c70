"""SAQ adapter."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.peers import Sender, chunks

LABEL = "SAQ"
PACKAGES = ("saq", "redis", "hiredis")
GATHER = 500
BULK = f"no bulk enqueue API (map waits for results): asyncio.gather of enqueue, {GATHER} at a time"
CONFIG = (
    "`saq settings --workers 1`, concurrency=100, job ttl 600 s (default), redis pool of 400 "
    "connections (redis-py 8's default of 100 is too small for concurrency 100), "
    "burst with dequeue_timeout=1 s where bursting"
)
BURST = True


def worker_argv(bindir: Path, url: str, burst: bool, index: int) -> list[str]:
    name = "settings_burst" if burst else "settings"
    return [str(bindir / "saq"), f"bench.peers.saq_tasks.{name}", "--workers", "1"]


class _Sender:
    def __init__(self, queue: object) -> None:
        self.queue = queue

    async def one(self, t_enqueued: float) -> None:
        await self.queue.enqueue("noop", t_enqueued=t_enqueued)

    async def bulk(self, n: int) -> None:
        for size in chunks(n, GATHER):
            jobs = (self.queue.enqueue("noop", t_enqueued=0.0) for _ in range(size))
            await asyncio.gather(*jobs)

    async def close(self) -> None:
        await self.queue.disconnect()


async def open_sender(url: str) -> Sender:
    from bench.peers.saq_tasks import queue  # built from BENCH_REDIS_URL, the same url

    await queue.connect()
    return _Sender(queue)
