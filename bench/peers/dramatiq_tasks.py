"""Dramatiq Redis broker and no-op actor (`dramatiq bench.peers.dramatiq_tasks`). JSON encoder."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench import probe
from bench.peers import QUEUE

broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"])
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="noop", queue_name=QUEUE, max_retries=0)
def noop(t_enqueued: float) -> None:
    probe.hit(t_enqueued)
