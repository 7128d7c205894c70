"""Rolling deploys with task versions, on real worker processes: a job waits for a worker with
its task version (set aside, never `dropped` while one is around) and runs only there."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

from engine import Client, EngineSettings, JobState, task_ref

from .harness import WorkerProc, audit, read_ledger
from .helpers import single_node
from .test_reliability import record, wait_terminal

pytestmark = single_node


def deploy_worker(url: str, ledger: Path, version: int) -> WorkerProc:
    return WorkerProc(
        url,
        ledger,
        concurrency=10,
        tasks="tests.engine.deploy_tasks",
        env={"DEPLOY_VERSION": str(version)},
    )


async def test_rolling_deploy_runs_each_job_on_its_version(
    settings: EngineSettings, ledger: Path, procs: list[WorkerProc]
) -> None:
    """v1 workers; v2 workers start; the producer switches to v2 jobs; v1 workers stop:
    0 dropped, 0 lost, 0 twice, each job run by a worker with its version (the ledger)."""
    url = settings.redis_url
    v1 = [deploy_worker(url, ledger, 1).start() for _ in range(2)]
    procs.extend(v1)
    ids: dict[str, int] = {}
    produce_version = 1
    stop_producing = asyncio.Event()
    most_set_aside = 0

    async def produce(client: Client) -> None:
        n = 0
        while not stop_producing.is_set():
            version = produce_version
            for _ in range(20):
                job_id = f"v{version}-{n}"
                n += 1
                ref = task_ref("deploy.send", version=version).using(job_id=job_id)
                await client.enqueue(ref, 5)
                ids[job_id] = version
            await asyncio.sleep(0.02)

    async def watch(client: Client) -> None:
        nonlocal most_set_aside
        while not stop_producing.is_set():
            counts = await client.queues.counts("default")
            most_set_aside = max(most_set_aside, counts["waiting_version"])
            await asyncio.sleep(0.05)

    async with Client(settings) as client:
        producer = asyncio.create_task(produce(client))
        watcher = asyncio.create_task(watch(client))
        await asyncio.sleep(1.5)
        v2 = [deploy_worker(url, ledger, 2).start() for _ in range(2)]
        procs.extend(v2)
        await asyncio.sleep(1.5)  # both versions side by side, v1 jobs still coming
        produce_version = 2
        await asyncio.sleep(1.0)  # v2 jobs, v1 workers still up: they set them aside
        v1_ids = [j for j, v in ids.items() if v == 1]
        await wait_terminal(client, v1_ids, timeout_s=60)
        for proc in v1:
            proc.signal(signal.SIGTERM)
        for proc in v1:
            assert await asyncio.to_thread(proc.wait) == 0
        await asyncio.sleep(1.0)  # v2 only
        stop_producing.set()
        await asyncio.gather(producer, watcher)
        started = time.monotonic()
        await wait_terminal(client, list(ids), timeout_s=60)
        states = Counter()
        for job_id in ids:
            states[(await client.jobs.get(job_id)).state] += 1
    assert states == {JobState.COMPLETED: len(ids)}, states
    report = audit(url, list(ids), ledger, faulted_pids=set())
    report.assert_clean()
    assert report.duplicates == 0
    ran = [x for x in read_ledger(ledger) if x["kind"] == "start"]
    assert Counter(x["id"] for x in ran) == Counter(dict.fromkeys(ids, 1))
    wrong = [x for x in ran if x["ran_with"] != ids[x["id"]]]
    assert not wrong, wrong[:5]
    assert most_set_aside > 0  # old and new workers did meet jobs they could not run
    record(
        "rolling_deploy",
        jobs=len(ids),
        v1=sum(1 for v in ids.values() if v == 1),
        v2=sum(1 for v in ids.values() if v == 2),
        dropped=states.get(JobState.DROPPED, 0),
        most_set_aside=most_set_aside,
        tail_s=f"{time.monotonic() - started:.1f}",
    )
