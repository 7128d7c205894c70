"""The README's main job for now: a private Redis, a worker, and a demo that feeds it jobs."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter

from rich.console import Console
from rich.table import Table

from engine import Client, EngineSettings, Job, RedisServer, task_ref

from . import demo_tasks as t

console = Console()


def demo_jobs() -> list[Job]:
    """Return a mix of jobs that shows every common outcome."""
    jobs = [t.resize_image.call(i, 320) for i in range(200)]
    jobs += [t.crunch_numbers.call(10_000 + i) for i in range(20)]
    jobs += [t.send_email.call("ada@example.com"), t.poll_upstream.call()]
    jobs.append(t.import_rows.call(6, 0.5))
    jobs += [t.charge_card.call(4200), t.resize_image.using(delay_s=1.5, priority=10).call(999, 64)]
    jobs.append(task_ref("demo.not_deployed_yet").call())
    return jobs


async def feed(settings: EngineSettings) -> None:
    """Enqueue the demo jobs, wait for all of them, and print what happened."""
    async with Client(settings) as client:
        start = time.monotonic()
        jobs = await client.enqueue_many(demo_jobs())
        console.print(f"enqueued [bold]{len(jobs)}[/] jobs in one round trip")
        finished = [await client.jobs.wait(job.id, timeout_s=30, queue=job.queue) for job in jobs]
        elapsed = time.monotonic() - start
        table = Table(title=f"{len(finished)} jobs finished in {elapsed:.2f}s")
        for column in ("task", "state", "attempts", "result or last error"):
            table.add_column(column)
        seen: Counter[tuple[str, str]] = Counter()
        for job in finished:
            seen[(job.task, job.state)] += 1
            if seen[(job.task, job.state)] > 1:
                continue
            failed = job.state != "completed" and job.error is not None
            detail = job.error["message"] if failed and job.error else repr(job.result)
            table.add_row(job.task, str(job.state), str(job.attempt), detail[:70])
        console.print(table)
        console.print(await client.queues.counts("default"))


def start_worker(settings: EngineSettings) -> subprocess.Popen[bytes]:
    """Start `python -m engine worker` on the demo tasks."""
    cmd = [
        sys.executable,
        "-m",
        "engine",
        "worker",
        "--url",
        settings.redis_url,
        "--tasks",
        "demo.demo_tasks",
        "--concurrency",
        "20",
        # A job of a task no worker has waits for one (a rolling deploy) for an hour by
        # default; the demo drops it after a second.
        "--set",
        "unserved_drop_after_s=1",
    ]
    return subprocess.Popen(cmd, start_new_session=True)


def main() -> int:
    """Run the demo; keep the worker running unless --once."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--once", action="store_true", help="exit after the demo")
    args = parser.parse_args()
    server = None
    url = os.environ.get("REDIS_URL")
    if not url:
        server = RedisServer().start()
        url = server.url
        console.print(f"started a private redis-server at {url}")
    settings = EngineSettings.from_url(url)
    worker = start_worker(settings)
    try:
        asyncio.run(feed(settings))
        if not args.once:
            console.print(f"worker still running on {settings.redacted_url}; Ctrl-C to stop")
            worker.wait()
    except KeyboardInterrupt:
        pass
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
