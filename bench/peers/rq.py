"""RQ adapter: SimpleWorker (no fork per job) and the JSON serializer on both sides."""

from __future__ import annotations

from pathlib import Path

from bench.peers import QUEUE, Sender, chunks

LABEL = "RQ"
PACKAGES = ("rq", "redis", "hiredis")
BATCH = 1000
BULK = f"Queue.enqueue_many (one pipeline), batches of {BATCH}"
CONFIG = (
    "`rq worker --worker-class rq.worker.SimpleWorker` (the default Worker forks per job), "
    "`--serializer rq.serializers.JSONSerializer`, `--quiet`, result_ttl 500 s (default), "
    "`--burst` where bursting"
)
BURST = True


def worker_argv(bindir: Path, url: str, burst: bool, index: int) -> list[str]:
    argv = [str(bindir / "rq"), "worker", "--url", url, "--quiet", "--disable-job-desc-logging"]
    argv += ["--worker-class", "rq.worker.SimpleWorker"]
    argv += ["--serializer", "rq.serializers.JSONSerializer", QUEUE]
    return [*argv, "--burst"] if burst else argv


class _Sender:
    def __init__(self, url: str) -> None:
        from redis import Redis
        from rq import Queue
        from rq.serializers import JSONSerializer

        from bench.peers.rq_tasks import noop

        self.noop = noop
        self.redis = Redis.from_url(url)
        self.queue = Queue(QUEUE, connection=self.redis, serializer=JSONSerializer)

    async def one(self, t_enqueued: float) -> None:
        self.queue.enqueue(self.noop, t_enqueued)

    async def bulk(self, n: int) -> None:
        prepare = self.queue.prepare_data
        for size in chunks(n, BATCH):
            self.queue.enqueue_many([prepare(self.noop, (0.0,)) for _ in range(size)])

    async def close(self) -> None:
        self.redis.close()


async def open_sender(url: str) -> Sender:
    return _Sender(url)
