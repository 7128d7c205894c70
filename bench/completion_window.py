"""The window between a job's end and its durable completion, with outcomes written as soon as
they come (engine.worker.flusher.MAX_FLUSHES writes in flight) and one write at a time (as before).

    .venv/bin/python -m bench.completion_window [--jobs 2000] [--no-docs]

On a private redis-server, one in-process worker runs N jobs twice per setting: a light load
(concurrency 8, each job sleeps 1-4 ms, so the worker is mostly not saturated) and a saturating
one (concurrency 100, no-op jobs enqueued in bulk first). The window is the worker's own
measure (`Worker.windows`: time.monotonic() from the job's end on the event loop to the reply
of the script that wrote it): a SIGKILL inside it re-runs a job that already ran to its end.
Writes the "completion-window" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from bench.report import publish
from engine import Client, EngineSettings, Worker, task
from engine.dev.devserver import RedisServer
from engine.worker import flusher as worker_module


@task(name="bench.window.sleep")
async def sleeps(ms: float) -> None:
    await asyncio.sleep(ms / 1000)


@task(name="bench.window.noop")
async def noop() -> None:
    return None


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def _one(url: str, n: int, flushes: int, light: bool) -> dict[str, float]:
    """Run one load with `flushes` writes in flight; return window µs and jobs/s."""
    settings = EngineSettings.from_url(url)
    worker_module.MAX_FLUSHES = flushes
    rng = random.Random(1)
    async with Client(settings) as client:
        await client.redis.flushall()
        if light:
            calls = [sleeps.call(rng.uniform(1, 4)) for _ in range(n)]
        else:
            calls = [noop.call() for _ in range(n)]
        for start in range(0, n, 1000):
            await client.enqueue_many(calls[start : start + 1000])
    worker = Worker(settings, [sleeps, noop], concurrency=8 if light else 100, burst=True)
    started = time.perf_counter()
    await worker.run()
    took_s = time.perf_counter() - started
    windows = [w * 1e6 for w in worker.windows]
    return {
        "p50": _pct(windows, 0.5),
        "p99": _pct(windows, 0.99),
        "max": max(windows, default=0.0),
        "jobs_s": n / took_s,
    }


def measure(url: str, n: int) -> dict[tuple[str, int], dict[str, float]]:
    """Return per (load, writes in flight) the window's p50, p99, max (µs) and jobs/s."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    kept = worker_module.MAX_FLUSHES
    try:
        for load, light, jobs in (("light", True, n), ("saturated", False, n * 5)):
            for flushes in (1, kept):
                out[(load, flushes)] = asyncio.run(_one(url, jobs, flushes, light))
    finally:
        worker_module.MAX_FLUSHES = kept
    return out


def report(rows: dict[tuple[str, int], dict[str, float]], n: int) -> str:
    """Return the section's Markdown."""
    lines = [
        "## The completion window",
        "",
        f"`python -m bench.completion_window --jobs {n}`, {time.strftime('%Y-%m-%d %H:%M')}: "
        "one in-process worker on a private redis-server; the window runs from a job's end to "
        "the reply of the script that made its outcome durable (a SIGKILL inside it re-runs a "
        "job that ran to its end). Light: concurrency 8, jobs sleeping 1-4 ms; saturated: "
        "concurrency 100, no-op jobs enqueued first. Writes in flight 1 is the flusher before "
        f"(one batch at a time); {worker_module.MAX_FLUSHES} is now "
        "(`engine.worker.flusher.MAX_FLUSHES`).",
        "",
        "| load | writes in flight | window p50 µs | window p99 µs | max µs | jobs/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for (load, flushes), r in rows.items():
        lines.append(
            f"| {load} | {flushes} | {r['p50']:,.0f} | {r['p99']:,.0f} | {r['max']:,.0f} "
            f"| {r['jobs_s']:,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.completion_window")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    with RedisServer() as server:
        rows = measure(server.url, args.jobs)
    publish("completion-window", report(rows, args.jobs), docs=not args.no_docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
