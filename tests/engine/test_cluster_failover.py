"""Redis Cluster failover with jobs flowing, judged by the task's own ledger (as for Sentinel in
test_failover): 3 masters with a replica each; the master of the "default" queue's slot is
failed over (a planned `CLUSTER FAILOVER` on its replica) or killed (SIGKILL) while a producer
enqueues and a worker subprocess runs the jobs. Afterwards: every acknowledged job ran, none
ran twice, every job that ran has its result on the new master, and within 2 s of the promotion
the producer had an acknowledgement from the new master and a job claimed there had started.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from engine import QueueKeys
from engine.dev.devcluster import ClusterServer
from engine.dev.devserver import RedisServer

from .harness import WorkerProc
from .sentinels import PromotionClock
from .test_failover import judge, produce, settle, warm_up
from .test_reliability import record

pytestmark = pytest.mark.chaos

FAULT_AT_S = 2.5


def planned(master: RedisServer, replica: RedisServer) -> None:
    with redis.Redis(port=replica.port) as r:
        r.execute_command("CLUSTER FAILOVER")


def sigkill(master: RedisServer, replica: RedisServer) -> None:
    master.stop(signal.SIGKILL)


@pytest.mark.parametrize("fault", [planned, sigkill], ids=["planned", "sigkill"])
async def test_cluster_failover_with_jobs_flowing(
    ledger: Path,
    procs: list[WorkerProc],
    fault: Callable[[RedisServer, RedisServer], None],
) -> None:
    with ClusterServer(replicas=1, node_timeout_ms=1000) as cluster:
        marker = QueueKeys("jobsite", "default").marker
        master, replica = cluster.node_of(marker), cluster.node_of(marker, "replica")
        worker = WorkerProc(cluster.url, ledger, concurrency=20).start()
        procs.append(worker)
        await warm_up(cluster.url, ledger)
        clock = PromotionClock(replica.port)
        clock.start()
        acked: dict[str, float] = {}
        producer = asyncio.create_task(produce(cluster.url, acked))
        await asyncio.sleep(FAULT_AT_S)
        fault_at = time.time()
        await asyncio.to_thread(fault, master, replica)
        refused = await producer
        clock.stop()
        assert clock.promoted_at is not None, "the replica was never promoted"
        await settle(ledger, acked, replica.port, timeout_s=12)
        cut_at = fault_at if fault is sigkill else clock.promoted_at
        figures = judge(ledger, acked, replica.port, clock.promoted_at, cut_at)
        figures.refused_enqueues = refused
        worker.stop()
    record(
        f"cluster_failover_{fault.__name__}",
        promotion_after_fault_s=round(clock.promoted_at - fault_at, 3),
        **figures.line(),
    )
    figures.check()
