"""Celery adapter: Redis broker, no result backend (Celery's default), solo pool."""

from __future__ import annotations

from pathlib import Path

from bench.peers import QUEUE, Sender

LABEL = "Celery"
PACKAGES = ("celery", "kombu", "redis", "hiredis")
BULK = "no bulk API: apply_async in a loop over one shared producer"
CONFIG = (
    "`celery worker -P solo -c 1`, prefetch multiplier 100, no result backend (default), "
    "`--without-gossip --without-mingle --without-heartbeat`, `-l WARNING`, json serializer; "
    "no burst mode (stopped by the harness)"
)
BURST = False


def worker_argv(bindir: Path, url: str, burst: bool, index: int) -> list[str]:
    argv = [str(bindir / "celery"), "-A", "bench.peers.celery_tasks", "worker"]
    argv += ["-P", "solo", "-c", "1", "-Q", QUEUE, "-n", f"bench{index}@%h", "-l", "WARNING"]
    return [*argv, "--without-gossip", "--without-mingle", "--without-heartbeat"]


class _Sender:
    def __init__(self) -> None:
        from bench.peers.celery_tasks import app, noop

        self.app = app
        self.noop = noop

    async def one(self, t_enqueued: float) -> None:
        self.noop.apply_async(args=(t_enqueued,))

    async def bulk(self, n: int) -> None:
        with self.app.producer_or_acquire() as producer:
            for _ in range(n):
                self.noop.apply_async(args=(0.0,), producer=producer)

    async def close(self) -> None:
        self.app.close()


async def open_sender(url: str) -> Sender:
    return _Sender()
