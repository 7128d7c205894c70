"""Flows and concurrency keys under SIGKILL: order kept, limits kept, nothing lost or doubled."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest

from engine import Client, EngineSettings

from . import chaos_tasks as ct
from .harness import WorkerProc, audit, read_ledger
from .test_reliability import record, wait_terminal

pytestmark = pytest.mark.chaos


async def test_flows_and_concurrency_keys_survive_sigkill(
    client: Client, settings: EngineSettings, ledger: Path, procs: list[WorkerProc]
) -> None:
    rng = random.Random(11)
    chains = []
    for _ in range(300):
        a = ct.work.call(rng.randint(10, 80))
        b = ct.work.using(depends_on=[a]).call(rng.randint(10, 80))
        c = ct.work.using(depends_on=[b]).call(rng.randint(10, 80))
        chains.append((a.id, b.id, c.id))
        await client.enqueue_flow([a, b, c])
    tenant_of: dict[str, str] = {}
    keyed = [ct.tenant.call(f"t{i % 3}", rng.randint(20, 120)) for i in range(600)]
    for job in await client.enqueue_many(keyed):
        tenant_of[job.id] = job.args[0]
    ids = [i for chain in chains for i in chain] + list(tenant_of)
    for _ in range(3):
        procs.append(WorkerProc(settings.redis_url, ledger, concurrency=20).start())
    killed: dict[int, float] = {}
    start = time.monotonic()
    for _ in range(5):
        await asyncio.sleep(1.5)
        victim = rng.randrange(len(procs))
        pid = procs[victim].pid
        procs[victim].signal(signal.SIGKILL)
        procs[victim].wait()
        killed[pid] = time.time()
        procs[victim] = WorkerProc(settings.redis_url, ledger, concurrency=20).start()
    await wait_terminal(client, ids, 120)
    report = audit(settings.redis_url, ids, ledger, set(killed))
    report.assert_clean()
    assert report.states == {"completed": len(ids)}

    lines = read_ledger(ledger)
    ends = {(x["id"], x["pid"]): x["t"] for x in lines if x["kind"] == "end"}
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for x in lines:
        if x["kind"] == "start":  # a run cut by a kill ended at the kill
            runs[x["id"]].append((x["t"], ends.get((x["id"], x["pid"]), killed.get(x["pid"], 0))))
    for parent_child in [(a, b) for a, b, _ in chains] + [(b, c) for _, b, c in chains]:
        parent, child = parent_child
        last_parent_end = max(end for _, end in runs[parent])
        first_child_start = min(begin for begin, _ in runs[child])
        assert first_child_start >= last_parent_end, parent_child
    worst = 0
    for name in {f"t{i}" for i in range(3)}:
        edges = sorted(
            (t, +1 if k == 0 else -1)
            for job_id, tenant in tenant_of.items()
            if tenant == name
            for begin, end in runs[job_id]
            for k, t in enumerate((begin, end))
        )
        running = 0
        for _, step in edges:
            running += step
            worst = max(worst, running)
    assert worst <= 2  # concurrency_limit=2 per tenant held across workers and kills
    counts = await client.queues.counts("default")
    assert (counts["blocked"], counts["waiting_turn"]) == (0, 0)
    leftovers = [k async for k in client.redis.scan_iter(match="jobsite:{default}:ckey:*:active")]
    sizes = [await client.redis.scard(k) for k in leftovers]
    assert sum(sizes) == 0
    record(
        "flow_chaos",
        jobs=len(ids),
        kills=len(killed),
        lost=len(report.lost),
        duplicates=report.duplicates,
        unexplained=len(report.unexplained),
        max_per_tenant=worst,
        elapsed_s=round(time.monotonic() - start, 1),
    )
