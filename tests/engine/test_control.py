"""Worker control on real worker processes: quiet, resume and stop one of two workers while
2,000 jobs flow; the tasks' own ledger says what each worker ran and when."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from engine import Client, ConfigError, EngineSettings, QueueKeys

from . import chaos_tasks as ct
from .harness import WorkerProc, audit, read_ledger
from .helpers import single_node, sync_redis
from .test_reliability import record, wait_terminal

pytestmark = single_node


async def entry(client: Client, pid: int, timeout_s: float = 15) -> dict[str, Any]:
    """Wait for the registry entry of the worker process `pid`."""
    deadline = time.monotonic() + timeout_s
    while True:
        for w in await client.workers.list():
            if w["pid"] == pid:
                return w
        assert time.monotonic() < deadline, f"worker {pid} never registered"
        await asyncio.sleep(0.05)


async def wait_state(client: Client, pid: int, state: str) -> float:
    """Wait until the workers list shows `state` for `pid`; return when (monotonic)."""
    deadline = time.monotonic() + 5
    while (await entry(client, pid))["state"] != state:
        assert time.monotonic() < deadline, f"worker {pid} never {state}"
        await asyncio.sleep(0.02)
    return time.monotonic()


async def test_quiet_resume_stop_one_of_two_under_flow(
    settings: EngineSettings, ledger: Path, procs: list[WorkerProc]
) -> None:
    a, b = (WorkerProc(settings.redis_url, ledger, concurrency=10).start() for _ in range(2))
    procs += [a, b]
    ids = [f"ctl-{i}" for i in range(2000)]
    later = [f"ctl-later-{i}" for i in range(400)]
    async with Client(settings) as client:
        a_id = (await entry(client, a.pid))["id"]
        await entry(client, b.pid)

        async def produce() -> None:
            for start in range(0, len(ids), 40):
                for job_id in ids[start : start + 40]:
                    await client.enqueue(ct.work.using(job_id=job_id), 5)
                await asyncio.sleep(0.02)

        producer = asyncio.create_task(produce())
        await asyncio.sleep(0.5)
        ordered = time.monotonic()
        assert await client.workers.control("quiet", worker=a_id) == [a_id]
        quiet_at = time.time()
        obeyed_s = await wait_state(client, a.pid, "quiet") - ordered
        assert obeyed_s < 1.0
        await asyncio.sleep(1.0)  # B alone takes the flow
        resume_at = time.time()
        assert await client.workers.control("resume", worker=a_id) == [a_id]
        await wait_state(client, a.pid, "claiming")
        # Work for both once A claims again (B alone may have caught up with the flow by now):
        # 2 s of it for B alone, so A finds some however slow its wake-up on a busy machine.
        await client.enqueue_many([ct.work.using(job_id=job_id).call(50) for job_id in later])
        await asyncio.sleep(0.5)
        assert await client.workers.control("stop", worker=a_id) == [a_id]
        stop_at = time.time()
        assert await asyncio.to_thread(a.wait, 30) == 0
        await producer
        ids += later
        await wait_terminal(client, ids, timeout_s=60)
    # Claims, as the server stamped them: none by A between the order and the resume, or
    # after the stop (a claim already queued behind its wait included).
    with sync_redis(settings.redis_url, decode_responses=True) as r:
        events = r.xrange(QueueKeys("jobsite", "default").events)
    claims_a = [
        int(e["at"]) / 1000
        for _, e in events
        if e["to"] == "started" and e["from"] == "submitted" and e["worker"] == a_id
    ]
    assert not [t for t in claims_a if quiet_at < t < resume_at]
    assert not [t for t in claims_a if t > stop_at]
    # The ledger agrees: a job claimed just before an order may start a moment after it.
    lines = read_ledger(ledger)
    starts_a = [x for x in lines if x["kind"] == "start" and x["pid"] == a.pid]
    quiet_starts = [x for x in starts_a if quiet_at + 0.5 < x["t"] < resume_at]
    assert quiet_starts == [], quiet_starts[:3]
    assert any(x["t"] > resume_at for x in starts_a)  # it claimed again once resumed
    late = [round(x["t"] - stop_at, 3) for x in starts_a if x["t"] > stop_at + 0.5]
    assert not late, late
    report = audit(settings.redis_url, ids, ledger, faulted_pids=set())
    report.assert_clean()
    assert report.duplicates == 0
    log = a.output()
    for line in ("worker quiet", "worker resumed", "by=control", "worker stopped"):
        assert line in log, log[-2000:]
    record(
        "worker_control",
        jobs=len(ids),
        run_by_a=len({x["id"] for x in starts_a}),
        started_by_a_while_quiet=len(quiet_starts),
        lost=len(report.lost),
        twice=report.duplicates,
        obeyed_within_s=f"{obeyed_s:.2f}",
    )


async def test_orders_by_host_or_queue_and_bad_orders(client: Client) -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        await client.workers.control("quiet")
    with pytest.raises(ConfigError, match="exactly one"):
        await client.workers.control("quiet", host="h", queue="q")
    with pytest.raises(ConfigError, match="unknown worker order"):
        await client.workers.control("pause", host="h")
    assert await client.workers.control("quiet", host="no-such-host") == []
