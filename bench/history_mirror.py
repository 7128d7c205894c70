"""Time the mirror against the big history: draining a backlog, and lag at a steady rate.

Drain: the events of `jobs` demo jobs are made with no mirror reading them (the event stream capped
high enough to keep every event), then a fresh `jobsite.jobs.history.mirror.Mirror` applies the
whole backlog; events/s = events / drain time. Three times: a steady backlog (a worker runs the jobs
as they are enqueued, as in a mirror outage under load); the same in two queues, drained by a mirror
process per queue at once (as `runworker --only mirror --queues ...` per set of queues runs them);
and a burst one (every job enqueued before any ran, the worst case: each job's events are far apart,
so the mirror carries a job until its later events come). Lag: `bench.mirror_lag.measure` (a feeder
and a worker process, the mirror here) at `rate` jobs/s. WAL bytes come from pg_current_wal_lsn()
(server-wide: other databases' writes in the same seconds count too).

Rows the mirror wrote are deleted afterwards (and the rollup counts put back), so the
database keeps exactly the filled history for `--reuse`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench.history_fill import connect, console

ROOT = Path(__file__).resolve().parent.parent

WAL_SQL = "SELECT pg_current_wal_lsn()::text"


def wal_bytes(conn: psycopg.Connection, since: str) -> int:
    """Return the WAL bytes written by the server since LSN `since`."""
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", [since])
    return int(row.fetchone()[0])  # type: ignore[index]


async def produce(
    redis_url: str, jobs: int, steady: bool, queues: Sequence[str] = ("default",)
) -> float:
    """Make the events of `jobs` demo jobs with no mirror reading them; return the seconds taken.

    Burst: every job is enqueued, then a burst worker runs them all (each job's events lie far
    apart in the stream: the worst case for the mirror). Steady: a worker runs the jobs as they
    are enqueued, as in a mirror outage under a steady load (a job's events lie close together).
    The jobs go to `queues` in turn.
    """
    from demo.demo_tasks import resize_image
    from engine import Client, EngineSettings, Worker
    from jobsite.jobs.tasks.registry import load_tasks

    cap = max(100_000, jobs * 4)  # the whole backlog stays, read or not
    settings = EngineSettings.from_url(redis_url, events_maxlen=cap, events_kept_without_group=cap)
    tasks = load_tasks(["demo.demo_tasks"])
    start = time.monotonic()
    async with Client(settings) as client:
        worker = Worker(settings, tasks, queues=queues, concurrency=500, burst=not steady)
        running = asyncio.ensure_future(worker.run()) if steady else None
        for first in range(0, jobs, 500):
            calls = [
                resize_image.using(queue=queues[n % len(queues)]).call(n, 1)
                for n in range(first, min(first + 500, jobs))
            ]
            await client.enqueue_many(calls)
            while steady and await _live(client, queues) > 1000:
                await asyncio.sleep(0.005)
        if running is None:
            await worker.run()
        else:
            while await _live(client, queues) > 0:
                await asyncio.sleep(0.05)
            worker.stop()
            await running
    return time.monotonic() - start


async def _live(client: Any, queues: Sequence[str]) -> int:
    """Return how many jobs of `queues` wait or run."""
    states = await client.queues.states(queues)
    return sum(counts["submitted"] + counts["started"] for _, counts in states)


# Where the drain's time goes: these functions of jobsite.jobs are wrapped with timers.
SPLIT = (
    ("jobsite.jobs.history.batches", "prepare"),
    ("jobsite.jobs.history.batches", "write_batch"),
    ("jobsite.jobs.history.bulkwrite", "lock_queues"),
    ("jobsite.jobs.history.bulkwrite", "stored"),
    ("jobsite.jobs.history.bulkwrite", "upsert"),
    ("jobsite.jobs.history.bulkwrite", "upsert_search"),
    ("jobsite.jobs.history.rollup", "write"),
)


@contextlib.contextmanager
def split_timers() -> Iterator[dict[str, float]]:
    """Yield seconds spent per function of SPLIT while the block runs (missing ones skipped)."""
    import importlib

    spent: dict[str, float] = defaultdict(float)
    patched: list[tuple[object, str, Callable[..., Any]]] = []

    def timer(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - start

        return timed

    for module_name, attr in SPLIT:
        module = importlib.import_module(module_name)
        fn = getattr(module, attr, None)
        if callable(fn):
            patched.append((module, attr, fn))
            setattr(module, attr, timer(attr, fn))
    try:
        yield spent
    finally:
        for module, attr, fn in patched:
            setattr(module, attr, fn)


def wal_kinds(conn: psycopg.Connection, start: str, end: str) -> str:
    """Return the WAL between two LSNs by resource manager and its full-page-image share.

    Needs pg_waldump and read access to pg_wal (a local server); else an empty string.
    """
    waldump = shutil.which("pg_waldump") or next(
        iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_waldump"), reverse=True)), None
    )
    wal_dir = Path(str(conn.execute("SHOW data_directory").fetchone()[0])) / "pg_wal"  # type: ignore[index]
    if waldump is None or not wal_dir.is_dir():
        return ""
    # Segments before the last checkpoint's redo point may be recycled already: sample after it.
    start = str(
        conn.execute(
            "SELECT greatest(redo_lsn, %s::pg_lsn)::text FROM pg_control_checkpoint()", [start]
        ).fetchone()[0]  # type: ignore[index]
    )
    out = subprocess.run(
        [str(waldump), "--stats", "-p", str(wal_dir), "-s", start, "-e", end],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    sizes: dict[str, tuple[int, int]] = {}
    for line in out.splitlines():
        m = re.match(r"(\w+)\s+\d+ \(\s*[\d.]+\)\s+(\d+) \(.*?\)\s+(\d+) \(.*?\)\s+(\d+)", line)
        if m and m.group(1) != "Total":
            sizes[m.group(1)] = (int(m.group(4)), int(m.group(3)))
    if not sizes:
        return ""
    total = sum(c for c, _ in sizes.values())
    fpi = sum(f for _, f in sizes.values())
    top = sorted(sizes.items(), key=lambda kv: -kv[1][0])[:4]
    kinds = ", ".join(f"{k} {c / total:.0%}" for k, (c, _) in top)
    return f"{kinds}; full-page images {fpi / total:.0%}; last {total / 2**20:,.0f} MiB sampled"


def as_runworker[T](main: Coroutine[Any, Any, T]) -> T:
    """Run `main` as `runworker` runs its loops: under jobsite.jobs.heap.worker_heap."""
    from jobsite.jobs.heap import worker_heap

    with worker_heap():
        return asyncio.run(main)


async def drain(queues: Sequence[str]) -> tuple[int, float]:
    """Apply every event of `queues` with a fresh mirror; return (events, seconds)."""
    from jobsite.jobs.history.mirror import Mirror

    mirror = Mirror(queues, consumer="bench-history")
    start = time.monotonic()
    try:
        await mirror.start()
        while await mirror.step(block_ms=200):
            pass
        return mirror.applied, time.monotonic() - start
    finally:
        await mirror.aclose()


def drain_backlog(
    url: str, redis_url: str, jobs: int, steady: bool, queues: Sequence[str] = ("default",)
) -> dict[str, Any]:
    """Make a backlog of `jobs` jobs' events (steady or burst) in `queues`, then time the mirror
    draining it: one mirror in this process, or with several queues a mirror process each."""
    redis.Redis.from_url(redis_url).flushall()
    kind = "steady" if steady else "burst"
    console.print(f"mirror drain: producing the events of {jobs:,} jobs ({kind}) ...")
    made_s = asyncio.run(produce(redis_url, jobs, steady, queues))
    console.print(f"  produced in {made_s:.1f} s; draining into the history ...")
    with connect(url) as conn:
        lsn = conn.execute(WAL_SQL).fetchone()[0]  # type: ignore[index]
        with split_timers() as spent:
            if len(queues) == 1:
                events, seconds = as_runworker(drain(queues))
            else:
                events, seconds = drain_apart(queues)
        wal = wal_bytes(conn, lsn)
        try:
            kinds = wal_kinds(conn, lsn, conn.execute(WAL_SQL).fetchone()[0])  # type: ignore[index]
        except psycopg.Error as exc:
            kinds = f"no breakdown: {exc}"
    return {
        "jobs": jobs,
        "kind": kind,
        "queues": len(queues),
        "events": events,
        "seconds": round(seconds, 2),
        "events_per_s": round(events / seconds) if seconds else 0,
        "wal_bytes_per_1000": round(wal / events * 1000) if events else None,
        "wal_kinds": kinds,
        "split_s": {k: round(v, 2) for k, v in spent.items()},
    }


def drain_apart(queues: Sequence[str]) -> tuple[int, float]:
    """Drain each queue with a mirror process of its own, all at once; return the events applied
    and the seconds the slowest took (`runworker --only mirror --queues ...` per set of queues)."""
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.history_mirror", queue], cwd=ROOT, stdout=subprocess.PIPE
        )
        for queue in queues
    ]
    results = [json.loads(child.communicate()[0].decode().splitlines()[-1]) for child in children]
    if any(child.returncode for child in children):
        raise RuntimeError("a mirror process failed; see its output above")
    return sum(int(r[0]) for r in results), max(float(r[1]) for r in results)


def lag_at_rate(url: str, redis_url: str, rate: int, seconds: float) -> dict[str, Any]:
    """Run bench.mirror_lag.measure against this database."""
    from bench.mirror_lag import measure

    redis.Redis.from_url(redis_url).flushall()
    console.print(f"mirror lag: {rate:,} jobs/s for {seconds:g} s ...")
    with connect(url) as conn:
        lsn = conn.execute(WAL_SQL).fetchone()[0]  # type: ignore[index]
        result = as_runworker(measure(redis_url, rate, seconds))
        wal = wal_bytes(conn, lsn)
    first = max(result["backlog_first_half"], default=0)
    second = max(result["backlog_second_half"], default=0)
    result["backlog_max_1st"], result["backlog_max_2nd"] = first, second
    # Flat: the second half never holds much more than the first (two batches of slack).
    result["backlog_flat"] = second <= max(first * 1.5, 4000)
    events = int(result["events"])
    result["wal_bytes_per_1000"] = round(wal / events * 1000) if events else None
    return result


def mark(url: str) -> dict[str, Any]:
    """Remember where the filled history ends (to remove what the mirror adds)."""
    with connect(url) as conn:
        at = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        minutes = conn.execute(
            "SELECT span_s, start, queue, task, series, bucket, count FROM jobsite_rollupcount"
            " WHERE start >= date_trunc('hour', %s::timestamptz)",
            [at],
        ).fetchall()
    return {"at": at, "minutes": minutes}


def restore(url: str, marked: dict[str, Any]) -> None:
    """Delete the jobs the mirror wrote since `marked`; put the rollup counts back."""
    at = marked["at"]
    with connect(url) as conn, conn.transaction():
        gone = conn.execute(
            "WITH gone AS (DELETE FROM jobsite_jobrecord WHERE updated_at >= %s RETURNING id),"
            " texts AS (DELETE FROM jobsite_jobsearch WHERE job_id IN (SELECT id FROM gone))"
            " SELECT count(*) FROM gone",
            [at],
        ).fetchone()[0]  # type: ignore[index]
        conn.execute(
            "DELETE FROM jobsite_rollupcount WHERE start >= date_trunc('hour', %s::timestamptz)",
            [at],
        )
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO jobsite_rollupcount"
                " (span_s, start, queue, task, series, bucket, count)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                marked["minutes"],
            )
    # Vacuumed, so that the next run starts from the same state (not from this one's dead rows).
    with connect(url) as conn:
        conn.execute("VACUUM jobsite_jobrecord, jobsite_jobsearch, jobsite_rollupcount")
    console.print(f"removed the {gone:,} jobs the mirror wrote (and vacuumed)")


def run(url: str, redis_url: str, drain_jobs: int, rate: int, seconds: float) -> dict[str, Any]:
    """Drain a backlog and measure lag at `rate`; leave the history as it was."""
    marked = mark(url)
    try:
        # The first drain after a VACUUM (the fill's, or the last run's clean-up) also fills the
        # free space VACUUM recorded in old pages, about a row per page: reported on its own.
        first = drain_backlog(url, redis_url, drain_jobs, steady=True)
        return {
            "first": {**first, "after_vacuum": True},
            "drain": drain_backlog(url, redis_url, drain_jobs, steady=True),
            "apart": drain_backlog(url, redis_url, drain_jobs, True, ("default", "media")),
            "burst": drain_backlog(url, redis_url, drain_jobs, steady=False),
            "lag": lag_at_rate(url, redis_url, rate, seconds),
        }
    finally:
        restore(url, marked)


if __name__ == "__main__":  # a mirror process of drain_apart (Django's settings from its env)
    import django

    django.setup()
    print(json.dumps(as_runworker(drain(sys.argv[1:]))))
