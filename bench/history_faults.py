"""The history under faults: real `runworker` processes, a private redis-server, SQLite or
PostgreSQL; every job that ends must get its row, in its final state.

`Site` is shared by tests/jobsite/test_history_faults.py (lean runs, seconds) and `main` here
(`bin/bench-mirror --faults`: the full-size pause, 100,000 jobs, and the catch-up rate after a
60 s pause at 5,000 jobs/s with the Redis memory the stream held meanwhile).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from engine import Client, EngineSettings
from engine.dev.devserver import RedisServer

ROOT = Path(__file__).resolve().parent.parent
# The history's tables a run empties (the rows, their search texts, the rollups).
TABLES = ("jobsite_jobrecord", "jobsite_jobsearch", "jobsite_rollupcount")
TASK = "bench.history.noop"


@dataclass(frozen=True, slots=True)
class Tally:
    """The history against the jobs fed: rows, and rows by state."""

    jobs: int
    states: dict[str, int]

    @property
    def rows(self) -> int:
        return sum(self.states.values())

    @property
    def missing(self) -> int:
        """Jobs without a row."""
        return self.jobs - self.rows

    @property
    def unsettled(self) -> int:
        """Rows not in their job's final state (every job fed completes)."""
        return self.rows - self.states.get("completed", 0)

    def __str__(self) -> str:
        return (
            f"jobs={self.jobs} rows={self.rows} missing={self.missing} unsettled={self.unsettled}"
        )


def pg_url(base: str, name: str) -> str:
    """Return `base` (a postgres:// URL) naming database `name` instead."""
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=f"/{name}"))


@dataclass
class Site:
    """A database (SQLite file or PostgreSQL database) migrated once, a private Redis, and the
    runworker processes started over them (each in its own session; stopped by `close`)."""

    tmp: Path
    db_url: str  # sqlite:///path or postgres://...
    redis_url: str = ""
    engine: dict[str, Any] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    fed: int = 0

    @property
    def postgres(self) -> bool:
        return self.db_url.startswith("postgres")

    def env(self, db_url: str | None = None) -> dict[str, str]:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.history_settings",
            "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "bench-only-" + "k" * 50),
            "DATABASE_URL": db_url or self.db_url,
            "REDIS_URL": self.redis_url or "redis://127.0.0.1:1/0",  # none yet: migrate
            "JOBSITE_TASK_MODULES": "bench.history_tasks",
            "JOBSITE_ENGINE": orjson.dumps(self.engine).decode(),
        }

    def migrate(self) -> None:
        """Create and migrate the database (PostgreSQL: dropped first if it exists)."""
        if self.postgres:
            import psycopg

            name = urlsplit(self.db_url).path.lstrip("/")
            with psycopg.connect(pg_url(self.db_url, "postgres"), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{name}"')
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"],
            cwd=ROOT,
            env=self.env(),
            check=True,
        )

    def drop(self) -> None:
        """Drop the PostgreSQL database (SQLite: the file goes with tmp)."""
        if self.postgres:
            import psycopg

            name = urlsplit(self.db_url).path.lstrip("/")
            with psycopg.connect(pg_url(self.db_url, "postgres"), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        """Yield a cursor on the database, committed at the end."""
        if self.postgres:
            import psycopg

            with psycopg.connect(self.db_url) as conn, conn.cursor() as cur:
                yield cur
        else:
            conn = sqlite3.connect(urlsplit(self.db_url).path, timeout=60)
            try:
                yield conn.cursor()
                conn.commit()
            finally:
                conn.close()

    def empty(self) -> None:
        """Empty the history's tables (a fresh run on the migrated database)."""
        with self.cursor() as cur:
            for table in TABLES:
                cur.execute(f"DELETE FROM {table}")
        self.fed = 0

    def tally(self) -> Tally:
        with self.cursor() as cur:
            cur.execute("SELECT state, COUNT(*) FROM jobsite_jobrecord GROUP BY state")
            return Tally(self.fed, {state: int(n) for state, n in cur.fetchall()})

    def start(
        self,
        name: str,
        only: str,
        *extra: str,
        db_url: str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start `manage.py runworker --only <only>`; its output in tmp/<name>.log."""
        argv = [sys.executable, "manage.py", "runworker", "--only", only, *extra]
        with (self.tmp / f"{name}.log").open("ab") as out:
            proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**self.env(db_url), **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def worker(self, concurrency: int = 200) -> subprocess.Popen[bytes]:
        return self.start("worker", "worker", "--concurrency", str(concurrency))

    def mirror(self, name: str = "mirror", db_url: str | None = None) -> subprocess.Popen[bytes]:
        return self.start(name, "mirror,reconcile", "--reconcile-interval", "10", db_url=db_url)

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    @staticmethod
    def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
        """Signal a process (SIGCONT first: a stopped one cannot act on SIGTERM); wait."""
        if proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def close(self) -> None:
        for proc in self.procs:
            self.stop(proc)

    def settings(self) -> EngineSettings:
        overrides = {k.lower(): v for k, v in self.engine.items()}
        return EngineSettings.from_url(self.redis_url, **overrides)

    async def feed(self, jobs: int, batch: int = 1000, **using: Any) -> None:
        """Enqueue `jobs` no-op jobs in batches (their options `using`)."""
        from bench.history_tasks import noop

        ref = noop.using(**using) if using else noop
        async with Client(self.settings()) as client:
            for start in range(0, jobs, batch):
                n = min(batch, jobs - start)
                await client.enqueue_many([ref.call(self.fed + i) for i in range(n)])
                self.fed += n

    async def drained(self, timeout_s: float = 300) -> float:
        """Wait until no job is queued or running; return the seconds waited."""
        began = time.monotonic()
        async with Client(self.settings()) as client:
            while time.monotonic() - began < timeout_s:
                counts = await client.queues.counts("default")
                if counts["submitted"] + counts["started"] + counts["scheduled"] == 0:
                    break
                await asyncio.sleep(0.1)
        return time.monotonic() - began

    async def queued(self) -> int:
        """Return the jobs queued or running."""
        async with Client(self.settings()) as client:
            counts = await client.queues.counts("default")
            return int(counts["submitted"] + counts["started"] + counts["scheduled"])

    async def redis_info(self) -> dict[str, int]:
        """Return the event stream's length and memory, and the queue's gap counts."""
        async with Client(self.settings()) as client:
            keys = client.keys("default")
            stats = await client.redis.hgetall(keys.stats)
            return {
                "stream_entries": int(await client.redis.xlen(keys.events)),
                "stream_bytes": int(await client.redis.memory_usage(keys.events) or 0),
                "missed": int(await client.redis.scard(keys.missed)),
                **{k: int(v) for k, v in stats.items() if k.startswith("gap_")},
            }

    async def gap_lost(self) -> tuple[int, int]:
        """Return the jobs the history lost to trims, as the metrics and the API report them."""
        from engine.resources.metrics import queue_metrics

        async with Client(self.settings()) as client:
            keys = client.keys("default")
            metrics = await queue_metrics(client.redis, keys, "mirror", int(time.time() * 1000))
            return metrics.gap_lost, (await client.queues.history_gaps("default"))["lost"]

    def settle(self, timeout_s: float = 180, want: int | None = None) -> tuple[Tally, float]:
        """Wait until every job fed has its row in its final state (or `timeout_s`); return the
        tally and the seconds waited. `want`: the rows expected (default: every job fed)."""
        began = time.monotonic()
        want = self.fed if want is None else want
        while True:
            tally = self.tally()
            done = tally.rows >= want and tally.unsettled == 0
            if done or time.monotonic() - began > timeout_s:
                return tally, time.monotonic() - began
            time.sleep(0.25)


def new_site(tmp: Path, db_url: str, engine: dict[str, Any] | None = None) -> Site:
    """Return a Site on a migrated database (SQLite: a file in tmp) with no Redis yet."""
    site = Site(tmp, db_url, engine=engine or {})
    site.migrate()
    return site


@contextmanager
def redis_for(site: Site) -> Iterator[RedisServer]:
    """Run a private redis-server for `site` (an empty history too) until the block ends."""
    site.empty()
    for old in site.tmp.glob("*.log"):
        old.unlink()
    with RedisServer() as server:
        site.redis_url = server.url
        try:
            yield server
        finally:
            site.close()
            site.procs.clear()


async def pause_run(site: Site, jobs: int, pause_s: float, warm: int = 1000) -> dict[str, Any]:
    """Mirror `warm` jobs, SIGSTOP the mirror, run `jobs` (at least `pause_s` seconds), SIGCONT.

    Returns the figures: the burst's run time, the stream's size while paused, the catch-up
    time and rate (events of the burst per second from SIGCONT to the last row), the tally.
    """
    site.worker()
    mirror = site.mirror()
    await site.feed(warm)
    tally, _ = site.settle(120)
    assert tally.missing == 0, tally
    os.kill(mirror.pid, signal.SIGSTOP)
    paused = time.monotonic()
    await site.feed(jobs)
    ran_s = await site.drained()
    await asyncio.sleep(max(0.0, pause_s - (time.monotonic() - paused)))
    held = await site.redis_info()
    os.kill(mirror.pid, signal.SIGCONT)
    tally, caught_s = site.settle(600)
    return {
        "jobs": jobs,
        "burst_run_s": round(ran_s, 1),
        "paused_s": round(time.monotonic() - paused - caught_s, 1),
        "stream_entries_held": held["stream_entries"],
        "stream_mib_held": round(held["stream_bytes"] / 2**20, 1),
        "catch_up_s": round(caught_s, 1),
        "catch_up_events_per_s": round(3 * jobs / caught_s) if caught_s else None,
        "missing": tally.missing,
        "unsettled": tally.unsettled,
        "gaps": {k: v for k, v in (await site.redis_info()).items() if k.startswith("gap_")},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--pause-s", type=float, default=30)
    parser.add_argument("--rate", type=int, default=5000, help="jobs/s of the fed pause run")
    parser.add_argument("--rate-pause-s", type=float, default=60)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    args = parser.parse_args()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"history-faults-{os.getpid()}"
    tmp.mkdir(parents=True)
    base = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    db_url = pg_url(base, "bench_history_faults") if args.db == "postgres" else ""
    db_url = db_url or f"sqlite:///{tmp}/history.sqlite3"
    site = new_site(tmp, db_url)
    try:
        with redis_for(site):
            out = asyncio.run(pause_run(site, args.jobs, args.pause_s))
        print(orjson.dumps({"db": args.db, "run": "pause", **out}).decode(), flush=True)
        with redis_for(site):
            out = asyncio.run(rate_run(site, args.rate, args.rate_pause_s))
        print(orjson.dumps({"db": args.db, "run": "rate", **out}).decode(), flush=True)
    finally:
        site.drop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


async def rate_run(site: Site, rate: int, pause_s: float) -> dict[str, Any]:
    """Feed `rate` jobs/s for `pause_s` with the mirror stopped (SIGSTOP), then let it catch up:
    the stream's peak size (entries, MiB) and the catch-up rate in events per second."""
    site.worker()
    mirror = site.mirror()
    await site.feed(100)
    site.settle(60)
    os.kill(mirror.pid, signal.SIGSTOP)
    began = time.monotonic()
    peak = {"stream_entries": 0, "stream_bytes": 0}
    sent = 0
    async with Client(site.settings()) as client:
        from bench.history_tasks import noop

        while (elapsed := time.monotonic() - began) < pause_s:
            due = int(elapsed * rate) - sent
            if due > 0:
                await client.enqueue_many([noop.call(site.fed + i) for i in range(due)])
                site.fed += due
                sent += due
            await asyncio.sleep(0.01)
            if sent % (rate // 2 or 1) < due:
                info = await site.redis_info()
                peak = {k: max(peak[k], info[k]) for k in peak}
    await site.drained()
    info = await site.redis_info()
    peak = {k: max(peak[k], info[k]) for k in peak}
    os.kill(mirror.pid, signal.SIGCONT)
    tally, caught_s = site.settle(900)
    return {
        "rate": rate,
        "pause_s": pause_s,
        "jobs": sent,
        "stream_entries_peak": peak["stream_entries"],
        "stream_mib_peak": round(peak["stream_bytes"] / 2**20, 1),
        "catch_up_s": round(caught_s, 1),
        "catch_up_events_per_s": round(3 * sent / caught_s) if caught_s else None,
        "missing": tally.missing,
        "unsettled": tally.unsettled,
    }


if __name__ == "__main__":
    raise SystemExit(main())
