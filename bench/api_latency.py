"""API and dashboard latency with 1,000,000 jobs in the history, on SQLite and PostgreSQL.

`python -m bench.api_latency [--rows 1000000]` (run by `bin/bench-api`): fills the history
table, then times list (first page, filtered, text search, second page), detail, and the
dashboard's snapshot, 20 calls each. Also measures how many websocket messages reach one
dashboard client while mirror batches land as fast as the consumer group delivers them.
Writes the "api-latency" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fill(rows: int) -> None:
    """Insert `rows` finished jobs (2 % failed) straight into the history table."""
    from datetime import UTC, datetime

    from django.db import transaction

    from jobsite.jobs.history import bulkwrite
    from jobsite.jobs.history import rows as history

    base_ms = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    batch = []
    for n in range(rows):
        at = str(base_ms + n * 1000)
        failed = n % 50 == 0
        errors = [{"type": "ValueError", "message": f"bad {n}"}] if failed else []
        fields = {
            "id": f"job{n:09d}",
            "queue": "default" if n % 3 else "emails",
            "task": f"app.task{n % 20}",
            "version": "1",
            "state": "failed" if failed else "completed",
            "attempt": "1",
            "args": json.dumps([n, f"customer-{n % 5000}"]),
            "errors": json.dumps(errors),
            "worker": "w1",
            **{f"{t}_at_ms": at for t in ("sent", "submitted", "claimed", "started")},
            **{f"{t}_at_ms": at for t in ("heartbeat", "completed")},
        }
        values = history.row_values(fields)
        batch.append(bulkwrite.Staged(fields["id"], f"{n:015d}-00000000", "[]", values))
        if len(batch) == 20_000:
            with transaction.atomic():
                bulkwrite.upsert(batch, history.ALL_BUT_ID)
            batch = []
    with transaction.atomic():
        bulkwrite.upsert(batch, history.ALL_BUT_ID)


def timed(fn, runs: int = 20) -> dict[str, float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    out.sort()
    return {
        "p50_ms": round(statistics.median(out), 1),
        "p95_ms": round(out[int(len(out) * 0.95) - 1], 1),
    }


def child(rows: int) -> dict[str, object]:
    """Measure in a process whose DATABASE_URL and REDIS_URL are set."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")
    import django

    django.setup()
    from asgiref.sync import async_to_sync
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client as WebClient

    from jobsite.jobs.api import live
    from jobsite.jobs.api.tokens import issue
    from jobsite.jobs.models import ApiToken, JobRecord

    call_command("migrate", verbosity=0)
    start = time.perf_counter()
    if JobRecord.objects.count() < rows:
        JobRecord.objects.all().delete()
        fill(rows)
    fill_s = time.perf_counter() - start
    user, _ = User.objects.get_or_create(username="bench", defaults={"is_staff": True})
    token = ApiToken(user=user, name="bench")
    key = issue(token)
    token.save()
    web = WebClient(HTTP_AUTHORIZATION=f"Bearer {key}")
    page = web.get("/api/v1/jobs?limit=50").json()

    def get(path: str) -> None:
        response = web.get(path)
        assert response.status_code == 200, (path, response.status_code)

    results = {
        "list, first page": timed(lambda: get("/api/v1/jobs?limit=50")),
        "list, state=failed": timed(lambda: get("/api/v1/jobs?state=failed&limit=50")),
        "list, queue+task": timed(lambda: get("/api/v1/jobs?queue=emails&task=app.task7&limit=50")),
        "list, second page": timed(
            lambda: get(f"/api/v1/jobs?limit=50&cursor={page['next_cursor']}")
        ),
        "list, text search": timed(lambda: get("/api/v1/jobs?q=customer-4242&limit=50"), runs=5),
        "detail": timed(lambda: get(f"/api/v1/jobs/job{rows // 2:09d}")),
        "dashboard snapshot": timed(lambda: async_to_sync(live.snapshot)({})),
        "dashboard snapshot, filtered": timed(
            lambda: async_to_sync(live.snapshot)({"state": "failed"})
        ),
    }
    return {
        "rows": JobRecord.objects.count(),
        "fill_s": round(fill_s, 1),
        "results": results,
        "websocket": async_to_sync(websocket_rate)(user),
    }


async def websocket_rate(user: object, seconds: float = 5.0) -> dict[str, float]:
    """Flood the dashboard group as fast as possible; count what reaches one client."""
    import asyncio

    from channels.db import database_sync_to_async
    from channels.layers import get_channel_layer
    from channels.testing import WebsocketCommunicator
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    from demo.asgi import application

    def make_session() -> str:
        store = SessionStore()
        store[SESSION_KEY] = str(user.pk)  # type: ignore[attr-defined]
        store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        store[HASH_SESSION_KEY] = user.get_session_auth_hash()  # type: ignore[attr-defined]
        store.save()
        return str(store.session_key)

    key = await database_sync_to_async(make_session)()
    headers = [(b"origin", b"http://localhost"), (b"cookie", f"sessionid={key}".encode())]
    socket = WebsocketCommunicator(application, "/ws/jobsite/dashboard/", headers=headers)
    connected, _ = await socket.connect()
    assert connected
    await socket.receive_json_from(timeout=10)
    layer = get_channel_layer()
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        await layer.group_send("dashboard", {"type": "jobs.changed"})
        sent += 1
        await asyncio.sleep(0)
    await asyncio.sleep(0.5)
    received = socket.output_queue.qsize()
    await socket.disconnect()
    return {"batches_per_s": round(sent / seconds), "messages_per_s": round(received / seconds, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.rows)))
        return 0
    sys.path.insert(0, str(ROOT))
    from bench.report import put_section
    from engine.dev.devserver import RedisServer

    measured = {}
    with tempfile.TemporaryDirectory() as tmp, RedisServer() as redis_server:
        dbs = {
            "SQLite": f"sqlite:///{tmp}/api.sqlite3",
            "PostgreSQL": os.environ.get(
                "BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/jobsite_bench"
            ),
        }
        if "jobsite_bench" in dbs["PostgreSQL"]:
            subprocess.run(
                [
                    "psql",
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                    "-q",
                    "-c",
                    "DROP DATABASE IF EXISTS jobsite_bench",
                    "-c",
                    "CREATE DATABASE jobsite_bench",
                ],
                check=False,
                capture_output=True,
            )
        for name, url in dbs.items():
            env = {
                **os.environ,
                "DATABASE_URL": url,
                "REDIS_URL": redis_server.url,
                "DJANGO_ALLOWED_HOSTS": "testserver,localhost",
            }
            out = subprocess.run(
                [sys.executable, "-m", "bench.api_latency", "--child", "--rows", str(args.rows)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                continue
            measured[name] = json.loads(out.stdout.strip().splitlines()[-1])
            print(name, json.dumps(measured[name]))
    names = list(next(iter(measured.values()))["results"]) if measured else []
    lines = [
        "## API and dashboard latency with a large history",
        "",
        f"`bin/bench-api` (`--rows {args.rows}`), {time.strftime('%Y-%m-%d %H:%M')}: "
        "in-process Django test client with an API token, 20 calls each (5 for text search);"
        " the dashboard snapshot includes the live counts read from Redis. Target: under 200 ms.",
        "",
        "| request | " + " | ".join(f"{db} p50 / p95 ms" for db in measured) + " |",
        "|---|" + "---|" * len(measured),
    ]
    for n in names:
        cells = [
            f"{m['results'][n]['p50_ms']} / {m['results'][n]['p95_ms']}" for m in measured.values()
        ]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += [
        "",
        " ".join(
            f"{db}: {m['rows']:,} rows (filled in {m['fill_s']} s)." for db, m in measured.items()
        ),
    ]
    for db, m in measured.items():
        ws = m["websocket"]
        lines.append(
            f"Websocket ({db} run): {ws['batches_per_s']:,} mirror notifications a second (the"
            " group flooded as fast as the channel layer takes them) reached one client as"
            f" {ws['messages_per_s']} messages a second (coalesced; at most 4)."
        )
    put_section(ROOT / "docs/benchmarks.md", "api-latency", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
