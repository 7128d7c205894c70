"""Mirror lag: event written -> row committed, at a steady job rate, on SQLite and PostgreSQL.

`python -m bench.mirror_lag [--rate 5000] [--seconds 20]` (run by `bin/bench-mirror`). For each
database it starts a worker process, feeds jobs at `--rate` per second for `--seconds` once that
worker has registered, runs the mirror in this process, and measures per event (written `at`,
Redis time) to the commit of its batch. It also samples the group's backlog (entries not yet
delivered plus pending) every second. Writes the "mirror-lag" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def child(db_url: str, redis_url: str, rate: int, seconds: float) -> dict[str, object]:
    """Run one measurement with DATABASE_URL=db_url (Django is set up here)."""
    os.environ["DATABASE_URL"] = db_url
    os.environ["REDIS_URL"] = redis_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")
    # A benchmark's own throw-away key (nothing it signs outlives the run).
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from jobsite.jobs.models import JobRecord, JobSearch, RollupCount

    JobRecord.objects.all().delete()
    JobSearch.objects.all().delete()
    RollupCount.objects.all().delete()
    from bench.history_mirror import as_runworker

    return as_runworker(measure(redis_url, rate, seconds))


async def measure(redis_url: str, rate: int, seconds: float) -> dict[str, object]:
    """Feed jobs from one process, run them in another, mirror them here; time every event."""
    from engine import Client, EngineSettings
    from jobsite.jobs.history import batches
    from jobsite.jobs.history.mirror import Mirror

    lags: list[float] = []
    write_batch = batches.write_batch

    def timed_batch(batch: Any, *args: Any) -> int:
        """Write (and commit) a batch as the mirror does; time each event to the commit."""
        written = write_batch(batch, *args)
        now_ms = time.time() * 1000
        lags.extend(now_ms - e.at_ms for seen in batch.jobs for e in seen.changes.values())
        return int(written)

    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine",
            "worker",
            "--url",
            redis_url,
            "--tasks",
            "demo.demo_tasks",
            "--concurrency",
            "200",
            "--log-level",
            "WARNING",
        ],
        cwd=ROOT,
    )
    batches.write_batch = timed_batch  # type: ignore[assignment]
    mirror = Mirror(["default"], consumer="bench")
    await mirror.start()
    # The lag of a running system: the feed starts once the worker has registered (jobs fed
    # while it boots would make a backlog, and time its start-up, not the mirror).
    async with Client(EngineSettings.from_url(redis_url)) as client:
        deadline = time.monotonic() + 60
        while not await client.workers.list():
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError("the worker process did not register within 60 s")
            await asyncio.sleep(0.1)
    stopping = asyncio.Event()
    runner = asyncio.create_task(mirror.run(stopping))
    feeder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.feed",
        redis_url,
        str(rate),
        str(seconds),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    backlog: list[int] = []
    async with Client(EngineSettings.from_url(redis_url)) as client:
        while feeder.returncode is None:
            groups = await client.redis.xinfo_groups(client.keys("default").events)
            g = groups[0] if groups else {}
            backlog.append(int(g.get("lag") or 0) + int(g.get("pending") or 0))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(feeder.wait(), timeout=1.0)
        sent = int((await feeder.stdout.read()).decode().strip() or 0)  # type: ignore[union-attr]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            counts = await client.queues.counts("default")
            if counts["submitted"] + counts["started"] == 0:
                break
            await asyncio.sleep(0.2)
    await asyncio.sleep(2)
    stopping.set()
    await runner
    await mirror.aclose()
    batches.write_batch = write_batch
    worker.terminate()
    worker.wait()
    lags.sort()

    def pick(q: float) -> float | None:
        return round(lags[min(len(lags) - 1, int(len(lags) * q))], 1) if lags else None

    half = len(backlog) // 2
    return {
        "jobs": sent,
        "rate": round(sent / seconds),
        "events": len(lags),
        "p50_ms": pick(0.5),
        "p99_ms": pick(0.99),
        "max_ms": pick(1.0),
        "backlog_first_half": backlog[:half],
        "backlog_second_half": backlog[half:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--child", nargs=2, metavar=("DB_URL", "REDIS_URL"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.rate, args.seconds)))
        return 0
    sys.path.insert(0, str(ROOT))
    from bench.report import put_section
    from engine.dev.devserver import RedisServer

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        dbs = {
            "SQLite": f"sqlite:///{tmp}/lag.sqlite3",
            "PostgreSQL": os.environ.get(
                "BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres"
            ),
        }
        for name, url in dbs.items():
            with RedisServer() as server:
                out = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "bench.mirror_lag",
                        "--rate",
                        str(args.rate),
                        "--seconds",
                        str(args.seconds),
                        "--child",
                        url,
                        server.url,
                    ],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    check=False,
                )
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                rows.append((name, None))
                continue
            result = json.loads(out.stdout.strip().splitlines()[-1])
            print(name, result)
            rows.append((name, result))
    lines = [
        "## Mirror lag (event written to row committed)",
        "",
        f"`bin/bench-mirror` (`--rate {args.rate} --seconds {args.seconds:g}`),"
        f" {time.strftime('%Y-%m-%d %H:%M')}: a feeder process enqueues {args.rate} jobs/s, one"
        " worker process (concurrency 200) runs them, the mirror runs in a third process"
        " (its default cap: up to 40,000 events per read);"
        " backlog = entries not yet delivered + delivered and not acked, sampled each second.",
        "",
        "| database | jobs | jobs/s | events | p50 ms | p99 ms | max ms | backlog 1st half"
        " | backlog 2nd half |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows:
        if r is None:
            lines.append(f"| {name} | failed | | | | | | | |")
            continue
        half1 = max(r["backlog_first_half"], default=0)
        half2 = max(r["backlog_second_half"], default=0)
        lines.append(
            f"| {name} | {r['jobs']:,} | {r['rate']:,} | {r['events']:,} | {r['p50_ms']} | "
            f"{r['p99_ms']} | {r['max_ms']} | max {half1:,} | max {half2:,} |"
        )
    lines += [
        "",
        "Target: p99 under 1 s with no growing backlog. `events` counts the events applied"
        " before the run stopped (the rest were still in the backlog).",
    ]
    put_section(ROOT / "docs/benchmarks.md", "mirror-lag", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
