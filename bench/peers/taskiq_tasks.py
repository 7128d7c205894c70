"""taskiq-redis ListQueueBroker and no-op task (`taskiq worker bench.peers.taskiq_tasks:broker`)."""

from __future__ import annotations

import os

from taskiq_redis import ListQueueBroker

from bench import probe
from bench.peers import QUEUE

broker = ListQueueBroker(url=os.environ["BENCH_REDIS_URL"], queue_name=QUEUE)


@broker.task(task_name="bench.noop")
async def noop(t_enqueued: float) -> None:
    probe.hit(t_enqueued)
