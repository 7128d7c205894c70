"""Celery app and no-op task (`celery -A bench.peers.celery_tasks worker`). JSON only."""

from __future__ import annotations

import os

from celery import Celery

from bench import probe
from bench.peers import QUEUE

PREFETCH_MULTIPLIER = 100

app = Celery("bench", broker=os.environ["BENCH_REDIS_URL"])
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=PREFETCH_MULTIPLIER,
    broker_connection_retry_on_startup=True,
)


@app.task(name="bench.noop")
def noop(t_enqueued: float) -> None:
    probe.hit(t_enqueued)
