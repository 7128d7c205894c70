"""Enqueue from synchronous code, as a Django view does: Jobsite's two paths beside its peers.

    python -m bench.sync_enqueue PATH N     # one path, in its system's venv: prints one JSON line
    bin/bench --only django-enqueue         # every path, on one private redis-server

PATHS: Jobsite `services.enqueue(task)` and a `django.tasks` task's `enqueue()` (the
JobsiteBackend), Dramatiq `actor.send()`, RQ `Queue.enqueue()`, Celery `task.delay()` and a
`django.tasks` task's `enqueue()` on the django-tasks-db backend (SQLite in a temporary
folder) and on PostgreSQL (a database of its own on BENCH_DATABASE_URL's server, default
127.0.0.1:5432, dropped after). Each path runs N sequential calls (each timed: calls/s, p50,
p99; the first call, which opens the connections, is not counted), then N calls from 8 threads
at once (calls/s).
Needs BENCH_REDIS_URL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

THREADS = 8
# path -> (label, venv of its system)
PATHS = {
    "jobsite-services": ("Jobsite, `services.enqueue(engine_task)`", ".venv"),
    "jobsite-django": ("Jobsite, a `django.tasks` task's `enqueue()`", ".venv"),
    "dramatiq": ("Dramatiq `actor.send()`", ".venv-bench"),
    "rq": ("RQ `Queue.enqueue()`", ".venv-bench"),
    "celery": ("Celery `task.delay()`", ".venv-bench"),
    "django-tasks-db": ("`django.tasks` on django-tasks-db (SQLite)", ".venv-bench"),
    "django-tasks-db-pg": ("`django.tasks` on django-tasks-db (PostgreSQL)", ".venv-bench"),
}
# The PostgreSQL server of the django-tasks-db-pg path: a database of its own is made there for
# the run and dropped after.
PG_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
# The peer the targets name: Jobsite's sync paths at least as fast as it.
REFERENCE = "dramatiq"


def _jobsite(path: str) -> Callable[[], Any]:
    os.environ.update(
        REDIS_URL=os.environ["BENCH_REDIS_URL"], DJANGO_SETTINGS_MODULE="demo.settings"
    )
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-" + "x" * 40)
    import django

    django.setup()
    from django.tasks import task

    from bench.django_enqueue import noop_for_django
    from bench.peers.jobsite_tasks import noop
    from jobsite.jobs import services

    if path == "jobsite-services":
        return lambda: services.enqueue(noop, 0.0)
    django_noop = task()(noop_for_django)
    return lambda: django_noop.enqueue(0.0)


def _dramatiq() -> Callable[[], Any]:
    from bench.peers.dramatiq_tasks import noop

    return lambda: noop.send(0.0)


def _rq() -> Callable[[], Any]:
    from rq import Queue
    from rq.serializers import JSONSerializer

    from bench.peers import QUEUE
    from bench.peers.rq_tasks import noop

    queue = Queue(
        QUEUE,
        connection=redis.Redis.from_url(os.environ["BENCH_REDIS_URL"]),
        serializer=JSONSerializer,
    )
    return lambda: queue.enqueue(noop, 0.0)


def _celery() -> Callable[[], Any]:
    from bench.peers.celery_tasks import noop

    return lambda: noop.delay(0.0)


def _pg_database() -> dict[str, Any]:
    """Make a database of this run's own on PG_URL; return its Django settings (dropped at exit)."""
    import atexit
    from urllib.parse import urlsplit

    import psycopg

    name = f"bench_dtdb_{os.getpid()}"
    with psycopg.connect(PG_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(PG_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    atexit.register(drop)
    url = urlsplit(PG_URL)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": url.username or "postgres",
        "PASSWORD": url.password or "",
        "HOST": url.hostname or "127.0.0.1",
        "PORT": str(url.port or 5432),
    }


def _django_tasks_db(postgres: bool) -> Callable[[], Any]:
    import django
    from django.conf import settings
    from django.core.management import call_command

    if postgres:
        database = _pg_database()
    else:
        folder = tempfile.mkdtemp(prefix="bench-dtdb-")
        database = {"ENGINE": "django.db.backends.sqlite3", "NAME": f"{folder}/db.sqlite3"}
    settings.configure(
        INSTALLED_APPS=["django_tasks_db"],
        DATABASES={"default": database},
        TASKS={"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}},
        USE_TZ=True,
    )
    django.setup()
    call_command("migrate", verbosity=0)
    from bench.peers.dtdb_tasks import noop

    return lambda: noop.enqueue(0.0)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(path: str, n: int) -> dict[str, float]:
    """Return sequential calls/s, p50 and p99 µs, and calls/s from THREADS threads."""
    if path.startswith("jobsite"):
        one = _jobsite(path)
    else:
        makers = {"dramatiq": _dramatiq, "rq": _rq, "celery": _celery}
        one = makers[path]() if path in makers else _django_tasks_db(path.endswith("-pg"))
    one()  # opens what the path keeps open
    took: list[float] = []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        one()
        took.append(time.perf_counter() - t0)
    sequential_s = time.perf_counter() - start
    each = max(1, n // THREADS)
    gate = threading.Barrier(THREADS + 1)

    def caller() -> None:
        one()  # this thread's connection (SQLite's is per thread)
        gate.wait()
        for _ in range(each):
            one()

    threads = [threading.Thread(target=caller) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    gate.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    threaded_s = time.perf_counter() - start
    return {
        "calls_s": n / sequential_s,
        "p50_us": _pct(took, 0.5) * 1e6,
        "p99_us": _pct(took, 0.99) * 1e6,
        "threads_calls_s": each * THREADS / threaded_s,
    }


def _pinned(redis_pid: int | None) -> Callable[[], None] | None:
    """Pin the redis-server to the first CPU; return what pins a path's process to the second.

    A sequential call waits for Redis to answer, and where the scheduler puts the two decides
    that wait: here a call took 82-95 µs with both on one CPU and 157-216 µs across two, and
    one run to the next of the same path landed either way. Pinned, every path crosses CPUs,
    as a call to a Redis on another machine does. None on a machine of one CPU.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if redis_pid is None or len(cpus) < 2:
        return None
    os.sched_setaffinity(redis_pid, {cpus[0]})
    return lambda: os.sched_setaffinity(0, {cpus[1]})


def run_all(
    root: Path, url: str, n: int, runs: int = 3, redis_pid: int | None = None
) -> dict[str, dict[str, float] | str]:
    """Run every path in its own venv against `url` (flushed between); best of `runs`.

    The paths take turns, round by round, so a noisy minute on a shared machine falls on
    every path alike instead of on the one that ran then. With `redis_pid` (the server's),
    the server and the paths run on CPUs of their own (`_pinned`) until the last path ends.
    """
    out: dict[str, dict[str, float] | str] = {}
    flush = redis.Redis.from_url(url)
    env = {**os.environ, "BENCH_REDIS_URL": url, "PYTHONPATH": str(root)}
    affinity = os.sched_getaffinity(redis_pid) if redis_pid is not None else None
    pin = _pinned(redis_pid)
    try:
        for _ in range(runs):
            for path, (_, venv) in PATHS.items():
                if isinstance(out.get(path), str):
                    continue  # failed in an earlier round
                flush.flushall()
                python = root / venv / "bin" / "python"
                argv = [str(python), "-m", "bench.sync_enqueue", path, str(n)]
                done = subprocess.run(
                    argv, env=env, cwd=root, capture_output=True, timeout=600, preexec_fn=pin
                )
                lines = done.stdout.decode(errors="replace").strip().splitlines()
                if done.returncode != 0 or not lines:
                    tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
                    out[path] = f"failed: {tail[0][:200]}"
                    continue
                got = json.loads(lines[-1])
                best = out.get(path)
                if not isinstance(best, dict) or got["calls_s"] > best["calls_s"]:
                    out[path] = got
    finally:
        if redis_pid is not None and affinity is not None:
            os.sched_setaffinity(redis_pid, affinity)
        flush.flushall()
        flush.close()
    return out


def markdown(rows: dict[str, dict[str, float] | str], n: int, rtt_ms: float | None = None) -> str:
    """Return the report section: per path the figures and the ratio to Dramatiq's."""
    ref = rows.get(REFERENCE)
    away = (
        ""
        if rtt_ms is None
        else f" {rtt_ms:g} ms away (through `bench/latency_proxy.py`, `--rtt-ms {rtt_ms:g}`)"
    )
    lines = [
        "## Enqueue from sync code, as a view does",
        "",
        f"`bin/bench --only django-enqueue`, {time.strftime('%Y-%m-%d %H:%M')}: {n} sequential "
        f"calls per path (each timed), then {n} calls from {THREADS} threads at once, on the "
        f"private redis-server{away} (flushed between paths), best of 3 rounds in which the "
        "paths take turns; the server on one CPU and each path on another (as a Redis on "
        "another machine; `_pinned`); the ratios are to Dramatiq's `send()` in the same run. "
        "On a shared machine these figures are noisy.",
        "",
        "| path | calls/s | p50 µs | p99 µs | 8 threads, calls/s | share of Dramatiq (seq) "
        "| share of Dramatiq (8 threads) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for path, (label, _) in PATHS.items():
        row = rows.get(path, "not run")
        if isinstance(row, str):
            lines.append(f"| {label} | {row} | | | | | |")
            continue
        ratios = ["", ""]
        if isinstance(ref, dict):
            ratios = [
                f"{row['calls_s'] / ref['calls_s']:.2f}",
                f"{row['threads_calls_s'] / ref['threads_calls_s']:.2f}",
            ]
        lines.append(
            f"| {label} | {row['calls_s']:,.0f} | {row['p50_us']:,.0f} | {row['p99_us']:,.0f} "
            f"| {row['threads_calls_s']:,.0f} | {ratios[0]} | {ratios[1]} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in PATHS:
        print(f"usage: python -m bench.sync_enqueue {{{','.join(PATHS)}}} N", file=sys.stderr)
        return 2
    print(json.dumps(measure(args[0], int(args[1]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
