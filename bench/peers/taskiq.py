"""taskiq adapter: taskiq-redis ListQueueBroker, no result backend (taskiq's default)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.peers import Sender, chunks

LABEL = "taskiq-redis"
PACKAGES = ("taskiq", "taskiq-redis", "redis", "hiredis")
GATHER = 500
BULK = f"no bulk API: asyncio.gather of kiq, {GATHER} at a time"
CONFIG = (
    "`taskiq worker --workers 1` (max-async-tasks 100, default), ListQueueBroker, "
    "no result backend (default), log level WARNING; no burst mode (stopped by the harness)"
)
BURST = False


def worker_argv(bindir: Path, url: str, burst: bool, index: int) -> list[str]:
    argv = [str(bindir / "taskiq"), "worker", "bench.peers.taskiq_tasks:broker"]
    return [*argv, "--workers", "1", "--log-level", "WARNING"]


class _Sender:
    def __init__(self) -> None:
        from bench.peers.taskiq_tasks import broker, noop

        self.broker = broker
        self.noop = noop

    async def one(self, t_enqueued: float) -> None:
        await self.noop.kiq(t_enqueued)

    async def bulk(self, n: int) -> None:
        for size in chunks(n, GATHER):
            await asyncio.gather(*(self.noop.kiq(0.0) for _ in range(size)))

    async def close(self) -> None:
        await self.broker.shutdown()


async def open_sender(url: str) -> Sender:
    sender = _Sender()
    await sender.broker.startup()
    return sender
