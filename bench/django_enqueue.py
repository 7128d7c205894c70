"""Enqueue one job at a time from Django code, beside the engine's own client, in one run.

    .venv/bin/python -m bench.django_enqueue [--jobs 5000] [--runs 3] [--no-docs]

On a private redis-server, times N sequential enqueues of a no-op task along each path a
Django project takes: the engine's async `Client.enqueue` (the floor), `services.enqueue` (sync,
on the caller's thread: engine.SyncClient), a `django.tasks` task's `enqueue()` (sync) and
`aenqueue()` (async, on the caller's loop), and the
way sync calls worked before the engine loop (`async_to_sync` with a client per call), best of
`--runs`. Writes the "django-enqueue" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.report import publish
from engine.dev.devserver import RedisServer


def _best_rate(n: int, runs: int, one: Callable[[], Any]) -> float:
    one()  # opens what the path keeps open
    best = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(n):
            one()
        best = max(best, n / (time.perf_counter() - start))
    return best


async def _best_rate_async(n: int, runs: int, one: Callable[[], Awaitable[Any]]) -> float:
    await one()
    best = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(n):
            await one()
        best = max(best, n / (time.perf_counter() - start))
    return best


def noop_for_django(t_enqueued: float) -> None:
    """Do nothing: the django.tasks task (made a task once Django is set up)."""


def measure(url: str, n: int, runs: int) -> dict[str, float]:
    """Return jobs/s per path, every path against the Redis at `url`."""
    os.environ.update(REDIS_URL=url, DJANGO_SETTINGS_MODULE="demo.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-" + "x" * 40)
    import django
    import uvloop

    django.setup()
    from asgiref.sync import async_to_sync
    from django.tasks import task

    from bench.peers.jobsite_tasks import noop
    from engine import Client
    from jobsite.jobs import services
    from jobsite.jobs.conf import engine_settings

    django_noop = task()(noop_for_django)

    async def client_per_call() -> None:
        async with Client(engine_settings()) as client:
            await client.enqueue(noop, 0.0)

    async def engine_floor() -> float:  # a client held open on the caller's own loop
        async with Client(engine_settings()) as client:
            return await _best_rate_async(n, runs, lambda: client.enqueue(noop, 0.0))

    rates = {"engine Client.enqueue (async)": uvloop.run(engine_floor())}
    rates["services.enqueue (sync)"] = _best_rate(n, runs, lambda: services.enqueue(noop, 0.0))
    rates["django.tasks enqueue() (sync)"] = _best_rate(n, runs, lambda: django_noop.enqueue(0.0))
    rates["django.tasks aenqueue() (async)"] = uvloop.run(
        _best_rate_async(n, runs, lambda: django_noop.aenqueue(0.0))
    )
    rates["before: async_to_sync, a client per call"] = _best_rate(
        max(n // 5, 100), runs, async_to_sync(client_per_call)
    )
    return rates


def report(rates: dict[str, float], n: int, runs: int) -> str:
    """Return the section's Markdown: jobs/s, µs a job and the share of the engine client."""
    base = next(iter(rates.values()))
    lines = [
        "## Enqueue one at a time from Django",
        "",
        f"`python -m bench.django_enqueue --jobs {n} --runs {runs}`, "
        f"{time.strftime('%Y-%m-%d %H:%M')}: sequential enqueues of a no-op task on a private "
        "redis-server, best of the runs; the last path is how sync calls ran before the engine "
        "loop (`jobsite/jobs/services/engineloop.py`). Peers beside these: `bin/bench --only "
        "django-enqueue`.",
        "",
        "| path | jobs/s | µs a job | share of the engine client |",
        "|---|---:|---:|---:|",
    ]
    for name, rate in rates.items():
        lines.append(f"| {name} | {rate:,.0f} | {1e6 / rate:,.0f} | {rate / base:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.django_enqueue")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    with RedisServer() as server:
        rates = measure(server.url, args.jobs, args.runs)
    body = report(rates, args.jobs, args.runs)
    publish("django-enqueue", body, docs=not args.no_docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
