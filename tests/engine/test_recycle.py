"""Recycling: a worker retires after max_jobs or above max_rss_mib, exits 0, and its
supervisor (here, the test) starts a fresh one; the tasks' own ledger shows nothing lost and
nothing run twice."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

from engine import Client, EngineSettings

from . import chaos_tasks as ct
from .harness import WorkerProc, audit, read_ledger
from .helpers import single_node
from .test_reliability import record, wait_terminal

pytestmark = single_node


def runs(ledger: Path, kind: str) -> Counter[str]:
    return Counter(x["id"] for x in read_ledger(ledger) if x["kind"] == kind)


async def test_leaking_task_recycles_by_rss(
    settings: EngineSettings, ledger: Path, procs: list[WorkerProc]
) -> None:
    """A task leaking 5 MiB a run: the worker retires above max_rss_mib, exits 0, loses none."""
    limit_mib = 150
    ids = [f"leak-{i}" for i in range(60)]  # 300 MiB of leaks if one worker ran them all
    async with Client(settings) as client:
        for job_id in ids:
            await client.enqueue(ct.leak.using(job_id=job_id))
        first = WorkerProc(settings.redis_url, ledger, concurrency=1, max_rss_mib=limit_mib)
        procs.append(first.start())
        assert await asyncio.to_thread(first.wait, 60) == 0
        log = first.output()
        assert "worker retiring" in log and "reason=max_rss" in log, log[-2000:]
        by_first = {x["id"] for x in read_ledger(ledger) if x["pid"] == first.pid}
        assert 0 < len(by_first) < len(ids)
        # Every job it began ended: it let them finish before it exited.
        assert runs(ledger, "start") == runs(ledger, "end")
        second = WorkerProc(settings.redis_url, ledger, concurrency=1, max_rss_mib=1000)
        procs.append(second.start())
        await wait_terminal(client, ids, timeout_s=60)
    assert set(runs(ledger, "end")) == set(ids)
    assert max(runs(ledger, "start").values()) == 1
    record("recycle_rss", jobs_before_retiring=len(by_first), max_rss_mib=limit_mib)


async def test_max_jobs_recycles_under_flow(
    settings: EngineSettings, ledger: Path, procs: list[WorkerProc]
) -> None:
    """max_jobs=100 while 1,000 jobs flow, two supervised workers: 0 lost, 0 run twice."""
    ids = [f"flow-{i}" for i in range(1000)]
    recycles = 0
    done = asyncio.Event()

    async def supervise() -> None:
        nonlocal recycles
        current: WorkerProc | None = None
        while not done.is_set():
            if current is None or not current.alive():
                if current is not None:
                    assert current.wait() == 0, current.output()[-2000:]
                    assert "reason=max_jobs" in current.output()
                    recycles += 1
                current = WorkerProc(settings.redis_url, ledger, concurrency=10, max_jobs=100)
                procs.append(current.start())
            await asyncio.sleep(0.05)

    async def produce(client: Client) -> None:
        for start in range(0, len(ids), 50):
            for job_id in ids[start : start + 50]:
                await client.enqueue(ct.work.using(job_id=job_id), 5)
            await asyncio.sleep(0.05)

    async with Client(settings) as client:
        supervisors = [asyncio.create_task(supervise()) for _ in range(2)]
        started = time.monotonic()
        await produce(client)
        await wait_terminal(client, ids, timeout_s=120)
        done.set()
        await asyncio.gather(*supervisors)
    report = audit(settings.redis_url, ids, ledger, faulted_pids=set())
    report.assert_clean()
    starts, ends = runs(ledger, "start"), runs(ledger, "end")
    assert set(ends) == set(ids) and max(starts.values()) == 1 and max(ends.values()) == 1
    assert report.duplicates == 0
    assert recycles >= 8  # 1,000 jobs, 100 a worker: about 10 retirements
    record(
        "recycle_max_jobs",
        jobs=len(ids),
        recycles=recycles,
        lost=len(report.lost),
        twice=report.duplicates,
        seconds=f"{time.monotonic() - started:.1f}",
    )
