"""Dramatiq adapter: Redis broker, one worker process with 8 threads, no results middleware."""

from __future__ import annotations

from pathlib import Path

from bench.peers import QUEUE, Sender

LABEL = "Dramatiq"
PACKAGES = ("dramatiq", "redis", "hiredis")
BULK = "no bulk API: actor.send in a loop"
THREADS = 8
CONFIG = (
    f"`dramatiq --processes 1 --threads {THREADS}`, default middleware (no results), "
    "JSON encoder (default); no burst mode (stopped by the harness)"
)
BURST = False


def worker_argv(bindir: Path, url: str, burst: bool, index: int) -> list[str]:
    argv = [str(bindir / "dramatiq"), "bench.peers.dramatiq_tasks"]
    return [*argv, "--processes", "1", "--threads", str(THREADS), "--queues", QUEUE]


class _Sender:
    def __init__(self) -> None:
        from bench.peers.dramatiq_tasks import broker, noop

        self.broker = broker
        self.noop = noop

    async def one(self, t_enqueued: float) -> None:
        self.noop.send(t_enqueued)

    async def bulk(self, n: int) -> None:
        for _ in range(n):
            self.noop.send(0.0)

    async def close(self) -> None:
        self.broker.close()


async def open_sender(url: str) -> Sender:
    return _Sender()
