"""arq adapter (runs in .venv-bench-arq: arq 0.28.0 needs redis<6)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.peers import Sender, chunks

LABEL = "arq"
PACKAGES = ("arq", "redis", "hiredis")
GATHER = 500
BULK = f"no bulk API: asyncio.gather of enqueue_job, {GATHER} at a time"
CONFIG = (
    "`arq WorkerSettings` max_jobs=100, poll_delay=0.5 s (default), keep_result=3600 s (default), "
    "JSON job serializer, log level WARNING, `--burst` where bursting"
)
BURST = True


def worker_argv(bindir: Path, url: str, burst: bool, index: int) -> list[str]:
    argv = [str(bindir / "arq"), "bench.peers.arq_tasks.WorkerSettings"]
    argv += ["--custom-log-dict", "bench.peers.arq_tasks.LOG_CONFIG"]
    return [*argv, "--burst"] if burst else argv


class _Sender:
    def __init__(self, pool: object) -> None:
        self.pool = pool

    async def one(self, t_enqueued: float) -> None:
        await self.pool.enqueue_job("noop", t_enqueued)

    async def bulk(self, n: int) -> None:
        for size in chunks(n, GATHER):
            await asyncio.gather(*(self.pool.enqueue_job("noop", 0.0) for _ in range(size)))

    async def close(self) -> None:
        await self.pool.aclose()


async def open_sender(url: str) -> Sender:
    from arq import create_pool
    from arq.connections import RedisSettings

    from bench.peers.arq_tasks import dumps, loads

    settings = RedisSettings.from_dsn(url)
    return _Sender(await create_pool(settings, job_serializer=dumps, job_deserializer=loads))
