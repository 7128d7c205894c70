"""Faults at the socket and in the process, judged by the tasks' own ledger.

Connection resets through a loopback proxy, Redis at maxmemory, a job that kills its process,
SystemExit in a task, SIGKILL chaos with default settings, blocked event loops, and a loop that
dies of a bug.
"""

from __future__ import annotations

import asyncio
import random
import signal
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from engine import Client, DuplicateJob, EngineSettings, JobState, RedisUnavailable
from engine.dev.devserver import RedisServer

from ..faultproxy import FaultProxy
from . import chaos_tasks as ct
from .harness import WorkerProc, audit, handbacks, read_ledger
from .helpers import STORED, single_node
from .test_reliability import record, wait_terminal

pytestmark = pytest.mark.chaos


def ends_per_job(ledger: Path) -> Counter[str]:
    return Counter(x["id"] for x in read_ledger(ledger) if x["kind"] == "end")


async def states(url: str, ids: list[str]) -> Counter[str]:
    async with (
        Client(EngineSettings.from_url(url)) as client,
        client.redis.pipeline(transaction=False) as pipe,
    ):
        for job_id in ids:
            pipe.hget(client.keys("default").job(job_id), STORED.state)
        return Counter(await pipe.execute())


@single_node
async def test_connection_resets_lose_nothing(
    settings: EngineSettings, ledger: Path, procs: list[WorkerProc]
) -> None:
    """Resets every 3 s for 15 s while 500 jobs flow: 0 lost, 0 twice, 0 exits, typed errors."""
    with FaultProxy(int(settings.redis_url.rsplit(":", 1)[1].split("/")[0])) as proxy:
        for _ in range(2):
            procs.append(WorkerProc(proxy.url(), ledger, concurrency=10, lease_ms=30_000).start())
        typed_errors = 0
        untyped: list[str] = []
        ids = [f"reset-{i}" for i in range(500)]

        async def produce() -> None:
            nonlocal typed_errors
            async with Client(EngineSettings.from_url(proxy.url())) as client:
                for job_id in ids:
                    while True:
                        try:
                            await client.enqueue(ct.plain.using(job_id=job_id), 50)
                            break
                        except DuplicateJob:
                            break  # the first try landed; its reply was cut off
                        except RedisUnavailable:
                            typed_errors += 1
                        except Exception as exc:
                            untyped.append(repr(exc))
                        await asyncio.sleep(0.05)
                    await asyncio.sleep(0.028)

        async def reset() -> int:
            for _ in range(5):
                await asyncio.sleep(3)
                proxy.reset_all()
            return proxy.resets

        _, resets = await asyncio.gather(produce(), reset())
        async with Client(settings) as client:
            await wait_terminal(client, ids, 60)
        exits = [p.proc.returncode for p in procs if p.proc and not p.alive()]
        assert not exits, [p.output()[-3000:] for p in procs]
    report = audit(settings.redis_url, ids, ledger, set())
    report.assert_clean()
    twice = [job for job, n in ends_per_job(ledger).items() if n > 1]
    assert report.states == {"completed": 500}
    assert not twice and not untyped, (twice[:5], untyped[:5])
    record(
        "connection_resets",
        jobs=len(ids),
        resets=resets,
        lost=len(report.lost),
        completed_twice=len(twice),
        worker_exits=len(exits),
        typed_errors=typed_errors,
        untyped_errors=len(untyped),
    )


@single_node
@pytest.mark.parametrize(
    ("verb", "claim_batch"), [("claim", 100), ("begin", 100), ("claim", 2), ("begin", 2)]
)
async def test_a_lost_reply_hands_the_jobs_back_at_once(
    verb: str, claim_batch: int, settings: EngineSettings, ledger: Path, procs: list[WorkerProc]
) -> None:
    """Claims (or begins) reach Redis but their replies are lost: the worker hands the jobs they
    took back as soon as Redis answers, not when their 60 s leases run out, and counts no stall.
    Each job runs once. With batches of 2 in 5 slots, claims are also sent ahead of the jobs a
    claim brought (Claimer._claim_ahead), and one of those may be the cut one."""
    task = ct.plain if verb == "claim" else ct.held  # held: claimed, then begun by begin-2.lua
    async with Client(settings) as client:
        ids = [j.id for j in await client.enqueue_many([task.call(20) for _ in range(30)])]
        script = client.scripts.raw[verb]
        sha = await client.redis.script_load(script.source)  # so that the cut one runs
        assert sha == script.sha
    with FaultProxy(int(settings.redis_url.rsplit(":", 1)[1].split("/")[0])) as proxy:
        proxy.cut_reply(sha.encode(), times=3)
        procs.append(
            WorkerProc(
                proxy.url(), ledger, concurrency=5, lease_ms=60_000, claim_batch=claim_batch
            ).start()
        )
        async with Client(settings) as client:
            await wait_terminal(client, ids, 30)
            stalls = [
                await client.redis.hget(client.keys("default").job(i), STORED.stalls) for i in ids
            ]
        assert proxy.cuts == 3
    report = audit(settings.redis_url, ids, ledger, set())
    report.assert_clean()
    assert report.states == {"completed": 30}
    assert set(ends_per_job(ledger).values()) == {1}
    assert not any(stalls), stalls
    assert "handed back jobs of lost claim replies" in procs[0].output(), procs[0].output()


@single_node
async def test_a_worker_whose_replies_vanish_reconnects(
    settings: EngineSettings, ledger: Path, procs: list[WorkerProc]
) -> None:
    """Every byte is lost for 3 s, without a reset: the idle worker's wait never gets its reply.
    It gives up at its timeout (idle_wait_s + socket_timeout_s) and waits again on a new
    connection, so a job enqueued afterwards runs (before: the claim loop waited for ever)."""
    with FaultProxy(int(settings.redis_url.rsplit(":", 1)[1].split("/")[0])) as proxy:
        procs.append(WorkerProc(proxy.url(), ledger, concurrency=2, socket_timeout_s=1.0).start())
        await asyncio.sleep(1.5)  # idle: its claim loop waits on the queue's marker
        proxy.dropping.set()
        await asyncio.sleep(3.0)
        proxy.dropping.clear()
        async with Client(settings) as client:
            job = await client.enqueue(ct.plain, 10)
            await wait_terminal(client, [job.id], 15)
            assert (await client.jobs.get(job.id)).state is JobState.COMPLETED
        assert procs[0].alive(), procs[0].output()[-2000:]


@pytest.fixture
def small_redis() -> Iterator[RedisServer]:
    args = ("--maxmemory", "6mb", "--maxmemory-policy", "noeviction")
    with RedisServer(args=args) as server:
        yield server


async def test_redis_at_maxmemory_loses_nothing_and_workers_go_on(
    small_redis: RedisServer, ledger: Path, procs: list[WorkerProc]
) -> None:
    url = small_redis.url
    async with Client(EngineSettings.from_url(url)) as client:
        ids = [j.id for j in await client.enqueue_many([ct.plain.call(100) for _ in range(600)])]
    for _ in range(2):
        procs.append(WorkerProc(url, ledger, concurrency=10, lease_ms=30_000).start())
    # Fill Redis once both workers run jobs, with about 3 s of work still queued: a worker that
    # starts late on a busy machine must not find the queue already done.
    deadline = time.monotonic() + 60
    while {x["pid"] for x in read_ledger(ledger) if x["kind"] == "end"} != {p.pid for p in procs}:
        assert time.monotonic() < deadline, [p.output()[-2000:] for p in procs]
        await asyncio.sleep(0.05)
    filler = redis.Redis(port=small_redis.port)
    n = 0
    for size in (100_000, 1_000, 10):  # fill Redis until it refuses even the smallest write
        while True:
            try:
                filler.set(f"filler:{n}", b"x" * size)
                n += 1
            except redis.exceptions.OutOfMemoryError:
                break
    full_at = time.time()
    async with Client(EngineSettings.from_url(url)) as client:
        waiting = (await client.queues.counts(ct.plain.options.queue))["submitted"]
    assert waiting > 0, "the queue ran dry before Redis was full: nothing would write while full"
    # Keep it full for 3 s: Redis frees client buffers as it goes, so one fill holds only for an
    # instant and the workers' next writes would find room again.
    while time.time() < full_at + 3.0:
        try:
            filler.set(f"filler:{n}", b"x" * 10)
            n += 1
        except redis.exceptions.OutOfMemoryError:
            await asyncio.sleep(0.005)
    ends_while_full = sum(1 for x in read_ledger(ledger) if x["kind"] == "end" and x["t"] > full_at)
    filler.delete(*[f"filler:{i}" for i in range(n)])
    freed_at = time.time()
    async with Client(EngineSettings.from_url(url)) as client:
        more = [j.id for j in await client.enqueue_many([ct.plain.call(50) for _ in range(200)])]
        await wait_terminal(client, ids + more, 60)
    assert all(p.alive() for p in procs), [p.output()[-3000:] for p in procs]
    report = audit(url, ids + more, ledger, set())
    report.assert_clean()
    assert report.states == {"completed": 800}
    after = Counter(
        x["pid"] for x in read_ledger(ledger) if x["kind"] == "end" and x["t"] > freed_at
    )
    assert set(after) == {p.pid for p in procs}, after  # every worker still does work
    logs = "".join(p.output() for p in procs)
    assert "reason=OOM" in logs
    filler.close()
    record(
        "redis_maxmemory",
        jobs=800,
        lost=len(report.lost),
        completions_run_while_full=ends_while_full,
        worker_exits=0,
        jobs_per_worker_after_freeing=dict(after),
    )


async def test_a_poison_job_kills_only_itself(
    settings: EngineSettings, client: Client, ledger: Path, procs: list[WorkerProc]
) -> None:
    """500 jobs + 1 that kills its process, 2 workers restarted on death: 500/500 complete."""
    rng = random.Random(5)
    calls = [ct.plain.call(rng.randint(50, 100)) for _ in range(500)]
    calls.insert(100, ct.poison.call())
    jobs = await client.enqueue_many(calls)
    ids = [j.id for j in jobs]
    poison_id = jobs[100].id
    for _ in range(2):
        procs.append(WorkerProc(settings.redis_url, ledger, concurrency=10, tunables=True).start())
    deaths = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        counts = await client.queues.counts("default")
        if counts["submitted"] + counts["started"] + counts["scheduled"] == 0:
            break
        for i, proc in enumerate(procs):
            if not proc.alive():
                deaths += 1
                procs[i] = WorkerProc(settings.redis_url, ledger, concurrency=10).start()
        await asyncio.sleep(0.2)
    await wait_terminal(client, ids, 30)
    got = await states(settings.redis_url, ids)
    poison = await client.jobs.get(poison_id)
    runs = sum(1 for x in read_ledger(ledger) if x["kind"] == "start" and x["id"] == poison_id)
    assert got == {"completed": 500, "stalled": 1}, got
    assert poison.state is JobState.STALLED
    assert runs == 1 + 1  # max_stalls (1) + 1
    assert "killed its process" in poison.errors[-1]["message"]
    assert poison_id in await client.redis.zrange(client.keys("default").dlq, 0, -1)
    record(
        "poison_neighbours", jobs=500, completed=got["completed"], poison_runs=runs, deaths=deaths
    )


async def test_system_exit_in_a_task_fails_that_job_only(
    settings: EngineSettings, client: Client, ledger: Path, procs: list[WorkerProc]
) -> None:
    calls = [
        ct.exit_async.call(3),
        ct.exit_async.call(None),
        ct.exit_sync.call(3),
        ct.exit_sync.call(None),
    ]
    exits = [j.id for j in await client.enqueue_many(calls)]
    after = (await client.enqueue(ct.plain, 10)).id
    worker = WorkerProc(settings.redis_url, ledger, concurrency=1).start()
    procs.append(worker)
    await wait_terminal(client, [*exits, after], 30)
    for job_id in exits:
        job = await client.jobs.get(job_id)
        assert job.state is JobState.FAILED
        assert job.errors[-1]["type"] == "SystemExit"
        assert "SystemExit" in job.errors[-1]["traceback"]
    assert (await client.jobs.get(after)).state is JobState.COMPLETED
    [end] = [x for x in read_ledger(ledger) if x["kind"] == "end"]
    assert end["pid"] == worker.pid and worker.alive()


@pytest.mark.long_window
async def test_sigkill_chaos_with_default_settings(
    settings: EngineSettings, client: Client, ledger: Path, procs: list[WorkerProc]
) -> None:
    """SIGKILL a random worker every 2 s for 20 s; defaults: 0 lost, handed back in 4 s (p99)."""
    rng = random.Random(3)
    ids = [
        j.id
        for j in await client.enqueue_many(
            [ct.plain.call(rng.randint(100, 500)) for _ in range(1000)]
        )
    ]

    def start() -> WorkerProc:
        return WorkerProc(settings.redis_url, ledger, concurrency=8, tunables=False).start()

    procs.extend(start() for _ in range(2))
    kill_times: dict[int, float] = {}
    await asyncio.sleep(2)
    for _ in range(10):
        victim = rng.randrange(len(procs))
        pid = procs[victim].pid
        procs[victim].signal(signal.SIGKILL)
        procs[victim].wait()
        kill_times[pid] = time.time()
        procs[victim] = start()
        await asyncio.sleep(2)
    await wait_terminal(client, ids, 120)
    report = audit(settings.redis_url, ids, ledger, set(kill_times))
    back = handbacks(settings.redis_url, ledger, kill_times)
    p99 = back[int(0.99 * (len(back) - 1))]
    # Jobs that ran to their end twice: their worker died after the function returned and
    # before the completion was durable (the window; bench/completion_window.py). Reported
    # (first, whatever the asserts below find), not asserted: a kill lands in that window by
    # chance.
    twice = [job for job, n in ends_per_job(ledger).items() if n > 1]
    record(
        "sigkill_chaos_defaults",
        jobs=1000,
        kills=len(kill_times),
        lost=len(report.lost),
        completed_twice=len(twice),
        orphaned=len(back),
        handback_p50_s=round(statistics.median(back), 2),
        handback_p99_s=round(p99, 2),
        handback_max_s=round(back[-1], 2),
    )
    report.assert_clean()
    assert report.states == {"completed": 1000}, report.states
    # The cleaner hands a cut-off job back within the liveness window, a cleaner interval and
    # 1 s of the kill (p99; defaults: 2 s and 1 s).
    defaults = EngineSettings.from_url(settings.redis_url)
    assert p99 <= defaults.liveness_window_s + defaults.cleaner_interval_s + 1.0, back[-10:]


@pytest.mark.long_window
async def test_blocked_loops_and_cpu_bound_jobs_keep_their_jobs(
    settings: EngineSettings, client: Client, ledger: Path, procs: list[WorkerProc]
) -> None:
    """20 s of a blocked event loop and of CPU-bound jobs, liveness window 1 s: 0 recoveries."""
    blocker = (await client.enqueue(ct.block_loop, 20.0)).id
    procs.append(WorkerProc(settings.redis_url, ledger, concurrency=1, lease_ms=30_000).start())
    while not any(x["id"] == blocker for x in read_ledger(ledger)):
        await asyncio.sleep(0.05)
    cpu = [j.id for j in await client.enqueue_many([ct.cpu.call(10.0) for _ in range(4)])]
    procs.append(WorkerProc(settings.redis_url, ledger, concurrency=2, lease_ms=30_000).start())
    await wait_terminal(client, [blocker, *cpu], 60)
    starts = Counter(x["id"] for x in read_ledger(ledger) if x["kind"] == "start")
    assert starts == {job_id: 1 for job_id in [blocker, *cpu]}
    got = await states(settings.redis_url, [blocker, *cpu])
    assert got == {"completed": 5}
    events = await client.redis.xrange(client.keys("default").events)
    recovered = [e for _, e in events if e["from"] == "started" and e["to"] != "completed"]
    assert recovered == []
    record(
        "no_false_recovery", blocked_loop_s=20, cpu_jobs_s=40, liveness_window_s=1.0, recoveries=0
    )


@pytest.mark.parametrize("loop", ["flush", "upkeep", "cleaner"])
async def test_a_loop_that_dies_of_a_bug_takes_the_worker_down(
    loop: str, settings: EngineSettings, client: Client, ledger: Path, procs: list[WorkerProc]
) -> None:
    ids = [j.id for j in await client.enqueue_many([ct.plain.call(50) for _ in range(20)])]
    env = {"JOBSITE_FAILPOINTS": f"bug_in_{loop}"}
    buggy = WorkerProc(settings.redis_url, ledger, concurrency=5, env=env).start()
    procs.append(buggy)
    assert buggy.wait(timeout_s=20) == 70
    assert f"loop crashed loop={'flusher' if loop == 'flush' else loop}" in buggy.output()
    procs.append(WorkerProc(settings.redis_url, ledger, concurrency=5).start())
    await wait_terminal(client, ids, 30)
    assert await states(settings.redis_url, ids) == {"completed": 20}
