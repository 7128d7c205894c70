"""Jobsite adapter: engine.Client for enqueueing, `python -m engine worker` for processing."""

from __future__ import annotations

from pathlib import Path

from bench.peers import Sender, chunks

LABEL = "Jobsite"
PACKAGES = ("jobsite", "redis", "hiredis", "orjson", "uvloop")
BATCH = 1000
BULK = f"Client.enqueue_many, batches of {BATCH} (one round trip per batch)"
CONCURRENCY = 200
CONFIG = (
    f"`python -m engine worker --concurrency {CONCURRENCY}` (asyncio), `--burst` where bursting"
)
BURST = True


def worker_argv(bindir: Path, url: str, burst: bool, index: int) -> list[str]:
    argv = [str(bindir / "python"), "-m", "engine", "worker", "--url", url]
    argv += ["--tasks", "bench.peers.jobsite_tasks", "--queues", "default"]
    argv += ["--concurrency", str(CONCURRENCY), "--log-level", "WARNING"]
    return [*argv, "--burst"] if burst else argv


class _Sender:
    def __init__(self, url: str) -> None:
        from bench.peers.jobsite_tasks import noop
        from engine import Client, EngineSettings

        self.noop = noop
        self.client = Client(EngineSettings.from_url(url))

    async def one(self, t_enqueued: float) -> None:
        await self.client.enqueue(self.noop, t_enqueued)

    async def bulk(self, n: int) -> None:
        for size in chunks(n, BATCH):
            await self.client.enqueue_many([self.noop.call(0.0) for _ in range(size)])

    async def close(self) -> None:
        await self.client.aclose()


async def open_sender(url: str) -> Sender:
    return _Sender(url)
