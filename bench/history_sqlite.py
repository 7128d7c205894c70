"""The history benchmark on SQLite: the same history, filled from Python, the same queries.

`bin/bench-history --sqlite PATH [--rows 1000000]`: rows come from a generator (the same
distribution as bench.history_data's SQL; state changes and search texts made by
jobsite.jobs.history.rows's `transition` and `search_text` themselves) and go in with
`executemany`, one transaction a chunk, the secondary indexes dropped meanwhile (the UNIQUE
constraints are part of SQLite's tables and stay). No mirror runs here. Writes the
"history-sqlite" section.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench import history_data as data
from bench.history_fill import SPAN_MS, console, gib, progress

# File bytes per job (row with ~3 state changes, search text, indexes), measured on a
# 1,000,000-job fill.
BYTES_PER_JOB = 1400
TABLES = ("jobsite_jobrecord", "jobsite_jobsearch", "jobsite_rollupcount")
JOB_COLUMNS = (
    "id, queue, task, version, state, priority, attempt, args, kwargs, result, errors,"
    " progress, progress_message, worker, sent_at, submitted_at, claimed_at, started_at,"
    " retried_at, heartbeat_at, completed_at, run_at, last_event_id, updated_at, transitions"
)


def _t(ms: int | None) -> str | None:
    """Return a time as Django stores it in SQLite (naive UTC text)."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None).isoformat(" ")


def _state(n: int, r: float, live_from: int) -> str:
    if n >= live_from:
        return ("submitted", "started", "scheduled")[n % 3]
    for limit, state in ((0.92, "completed"), (0.96, "failed"), (0.975, "cancelled")):
        if r < limit:
            return state
    return "expired" if r < 0.985 else "stalled" if r < 0.993 else "dropped"


def _times(state: str, sub: int, rng: random.Random) -> tuple[int | None, int | None]:
    """Return (start ms, end ms) of a job submitted at `sub`."""
    wait = 5 + int(rng.random() ** 3 * 2000)
    run = 20 + int(rng.random() ** 2 * 5000)
    if state in ("submitted", "scheduled"):
        return None, None
    if state in ("cancelled", "expired"):
        return None, sub + wait
    return sub + wait, (None if state == "started" else sub + wait + run)


ERR = {
    "cancelled": "cancelled by user",
    "expired": "deadline passed",
    "stalled": "Shutdown: stopped on shutdown",
    "dropped": "Dropped: task no longer registered",
}


def _failure(n: int, state: str, done: int | None) -> tuple[list[dict[str, Any]], str]:
    """Return the error records of job `n` and the error text of its last event."""
    if state != "failed":
        return [], ERR.get(state, "")
    exc, template = data.ERRORS[n % 4]
    msg = template.format(a=1000 + n * 13 % 9000, b=n % 1000000)
    record = {"attempt": 1, "type": "error", "exception": exc, "message": msg, "at_ms": done}
    record["traceback"] = data.TRACEBACK.replace("{b}", str(n % 1000000))
    return [record], f"error: {msg}"[:200]


def _events(
    state: str, sub: int, start: int | None, done: int | None, worker: str, err: str
) -> list[tuple[int, str, str, int, int, str, str]]:
    """Return (k, from, to, ms, attempt, worker, error) of each event of a job."""
    first = "scheduled" if state == "scheduled" else "submitted"
    events = [(0, "unsubmitted", first, sub, 0, "", "")]
    if start is not None:
        events.append((1, "submitted", "started", start, 1, worker, ""))
        if done is not None:
            events.append((2, "started", state, done, 1, worker, err))
    elif done is not None:
        events.append((1, "submitted", state, done, 0, "", err))
    return events


def job(n: int, rows: int, start_ms: int, rng: random.Random) -> tuple[tuple[Any, ...], list]:
    """Return job `n`'s row and its state changes (as bench.history_data.CHUNK_SQL makes them)."""
    from engine.stream.events import Event
    from jobsite.jobs.history.rows import search_text, transition

    step = SPAN_MS / rows
    sub = start_ms + int(n * step + rng.random() * step)
    state = _state(n, rng.random(), rows - max(3, int(rows * data.LIVE_FRACTION)))
    t = int(40 * rng.random() ** 2)
    task, queue = data.TASKS[t], data.QUEUES[t % 5]
    bits = rng.getrandbits(72)
    job_id = f"{sub:012x}7{bits >> 60:03x}{'89ab'[n % 4]}{bits & (1 << 60) - 1:015x}"
    args = f'[{n % 100000},"user-{rng.randrange(10000)}",{{"sku":"SKU-{n * 7 % 1000000:06d}"}}]'
    source, priority = ("api", "web", "cron", "import")[n % 4], ("normal", "high")[n % 2]
    kwargs = f'{{"source":"{source}","priority":"{priority}"}}'
    start, done = _times(state, sub, rng)
    worker = "" if start is None else data.WORKERS[n % 8]
    errors, err = _failure(n, state, done)
    changes = [
        transition(Event(queue, f"{ms:015d}-{n * 3 + k:08d}", job_id, f, to, ms, att, w, e))
        for k, f, to, ms, att, w, e in _events(state, sub, start, done, worker, err)
    ]
    result = orjson.dumps({"ok": True, "items": n % 50}).decode() if state == "completed" else None
    times = (_t(sub), _t(sub), _t(start), _t(start), None, _t(start), _t(done))
    run_at = _t(sub + 3600000) if state == "scheduled" else None
    row = (
        *(job_id, queue, task, 1, state, 10 if n % 20 == 0 else 0, 0 if start is None else 1),
        *(args, kwargs, result, orjson.dumps(errors).decode(), None, "", worker),
        *(*times, run_at, changes[-1]["id"], _t(done or start or sub)),
        orjson.dumps(changes).decode(),
    )
    return (
        row,
        (job_id, search_text(task, args, kwargs, errors)),
        [(queue, task, c) for c in changes],
    )


def generate(rows: int, chunk: int, minutes: Counter[tuple[int, str, str, str]]) -> Iterator[tuple]:
    """Yield (job rows, search rows) of `chunk` jobs at a time; count their state changes."""
    rng = random.Random(13)
    start_ms = int(time.time() * 1000) - SPAN_MS
    for a in range(0, rows, chunk):
        jobs: list[Any] = []
        texts: list[Any] = []
        for n in range(a, min(a + chunk, rows)):
            row, text, changes = job(n, rows, start_ms, rng)
            jobs.append(row)
            texts.append(text)
            for queue, task, c in changes:
                minutes[(c["at_ms"] // 60_000 * 60_000, queue, task, c["to"])] += 1  # type: ignore[index]
        yield jobs, texts


def load(conn: sqlite3.Connection, rows: int, chunk: int) -> Counter[tuple[int, str, str, str]]:
    """Insert the jobs and search texts, one transaction a chunk; return the minute counts."""
    jobs_sql = f"INSERT INTO jobsite_jobrecord ({JOB_COLUMNS}) VALUES ({', '.join('?' * 25)})"
    texts_sql = "INSERT INTO jobsite_jobsearch (job_id, text) VALUES (?, ?)"
    minutes: Counter[tuple[int, str, str, str]] = Counter()
    with progress() as bar:
        task = bar.add_task("jobs (with ~3 state changes each)", total=rows)
        for jobs, texts in generate(rows, chunk, minutes):
            conn.execute("BEGIN")
            conn.executemany(jobs_sql, jobs)
            conn.executemany(texts_sql, texts)
            conn.execute("COMMIT")
            bar.advance(task, len(jobs))
    return minutes


def add_extras(conn: sqlite3.Connection, minutes: Counter[tuple[int, str, str, str]]) -> None:
    """Write the charts' rollup counts (every span); add a few worker and queue rows."""
    now = _t(int(time.time() * 1000))
    conn.execute("BEGIN")
    spans: Counter[tuple[int, str, str, str, str]] = Counter()
    for (minute_ms, queue, task, state), n in minutes.items():
        for span_s in (60, 900, 3600):
            start = _t(minute_ms - minute_ms % (span_s * 1000))
            spans[(span_s, start, queue, task, state)] += n  # type: ignore[index]
            spans[(span_s, start, "", "", state)] += n  # type: ignore[index]  # the totals
    conn.executemany(
        "INSERT INTO jobsite_rollupcount (span_s, start, queue, task, series, bucket, count)"
        " VALUES (?, ?, ?, ?, ?, 0, ?)",
        [(*key, n) for key, n in sorted(spans.items())],
    )
    for worker in data.WORKERS:
        host, pid, _ = worker.split(":")
        conn.execute(
            "INSERT INTO jobsite_workerrecord (id, host, pid, queues, concurrency, current_jobs,"
            " started_at, heartbeat_at, role) VALUES (?, ?, ?, ?, 50, '[]', ?, ?, '')",
            [worker, host, int(pid), ",".join(data.QUEUES), now, now],
        )
    for name in data.QUEUES:
        conn.execute(
            "INSERT INTO jobsite_queuerecord (name, paused, submitted, scheduled, started, dlq,"
            " updated_at) VALUES (?, 0, 0, 0, 0, 0, ?)",
            [name, now],
        )
    conn.execute("COMMIT")


def fill(path: Path, rows: int, chunk: int) -> dict[str, Any]:
    """Fill the migrated SQLite file at `path`; return sizes and phase times."""
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("synchronous = OFF", "cache_size = -1000000", "temp_store = MEMORY"):
        conn.execute(f"PRAGMA {pragma}")
    marks = ", ".join("?" * len(TABLES))
    saved = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        f" AND tbl_name IN ({marks})",
        TABLES,
    ).fetchall()
    for name, _ in saved:
        conn.execute(f'DROP INDEX "{name}"')
    phases: dict[str, float] = {}
    t = time.monotonic()
    minutes = load(conn, rows, chunk)
    phases["rows"] = time.monotonic() - t
    t = time.monotonic()
    add_extras(conn, minutes)
    phases["minute counts"] = time.monotonic() - t
    t = time.monotonic()
    with progress() as bar:
        for name, sql in saved:
            task = bar.add_task(name, total=1)
            conn.execute(sql)
            bar.advance(task)
    phases["indexes"] = time.monotonic() - t
    t = time.monotonic()
    conn.execute("ANALYZE")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    phases["analyze"] = time.monotonic() - t
    conn.close()
    size = path.stat().st_size
    return {
        "rows": rows,
        "events": sum(minutes.values()),
        "db_bytes": size,
        "bytes_per_job": round(size / max(rows, 1)),
        "phases_s": {k: round(v, 1) for k, v in phases.items()},
    }


def read_info(path: Path) -> dict[str, Any] | None:
    """Return what the last complete fill of this file recorded, if any."""
    if not path.exists():
        return None
    with sqlite3.connect(path) as conn:
        try:
            row = conn.execute("SELECT info FROM bench_history_info").fetchone()
        except sqlite3.OperationalError:
            return None
    return orjson.loads(row[0]) if row else None


def write_info(path: Path, info: dict[str, Any]) -> None:
    """Record a complete fill (what --reuse checks)."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_history_info (info text NOT NULL)")
        conn.execute("DELETE FROM bench_history_info")
        conn.execute("INSERT INTO bench_history_info VALUES (?)", [orjson.dumps(info).decode()])


def remove(path: Path) -> None:
    """Delete the SQLite file and its WAL and shared-memory files."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def check_disk(path: Path, rows: int) -> None:
    """Print what the fill needs; exit with a clear message when the disk is too small."""
    need = int(rows * BYTES_PER_JOB * 1.5)
    free = shutil.disk_usage(path.parent).free
    console.print(
        f"fill of {rows:,} jobs: about {gib(rows * BYTES_PER_JOB)} in {path} ({BYTES_PER_JOB}"
        f" bytes a job), {gib(need)} needed during the fill; {gib(free)} free"
    )
    if free < need:
        raise SystemExit(f"not enough free disk: {gib(need)} needed, {gib(free)} free")


def main(args: argparse.Namespace, command: str) -> int:
    """Fill (or reuse) the SQLite file and time the queries against it."""
    from django.db import connections

    from bench import history_report as report
    from bench import history_time
    from bench.history import known_queues, setup_django
    from engine.dev.devserver import RedisServer

    path = Path(args.sqlite).resolve()
    info = read_info(path) if args.reuse else None
    made = info is None or info.get("rows") != args.rows
    if made:
        check_disk(path, args.rows)
        remove(path)
    with RedisServer() as server:
        setup_django(f"sqlite:///{path}", server.url)
        try:
            if made:
                from django.core.management import call_command

                start = time.monotonic()
                call_command("migrate", verbosity=0)
                info = fill(path, args.rows, min(args.chunk, 50_000))
                info["fill_s"] = round(time.monotonic() - start, 1)
                info["filled_at"] = time.strftime("%Y-%m-%d %H:%M")
                write_info(path, info)
                console.print(f"filled {info['events']:,} events; {info}")
            assert info is not None
            known_queues(server.url)
            load = os.getloadavg()[0]
            timings = [] if args.skip_queries else history_time.run(report.print_timing)
            rows = report.rows(info, timings, None, load)
            report.show(rows, timings)
            if not args.no_docs:
                report.write(
                    info, rows, command, sqlite3.sqlite_version, "SQLite", "history-sqlite"
                )
            report.save_explains(timings)
        finally:
            connections.close_all()
            if made and not args.keep:
                remove(path)
    return 0
