"""Fill the history benchmark's PostgreSQL database fast: server-side rows, indexes after.

`migrate` makes the schema; then the secondary indexes of the history tables are dropped
(definitions kept, primary keys stay), the rows are generated on the server in chunks
(`bench.history_data.CHUNK_SQL`, one statement each, `--jobs` connections at once), the
per-minute counts are summed from the state changes, the indexes are built again and the tables
vacuumed and analyzed.
"""

from __future__ import annotations

import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from bench import history_data as data

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/jobsite_bench_history"
TABLES = ("jobsite_jobrecord", "jobsite_jobsearch", "jobsite_rollupcount")
# Database bytes per job (row with ~3 state changes, search text, every index), measured on a
# 1,000,000-job fill (1,646 with the per-minute counts), plus the per-minute counts (at most
# 30 days x 5 queues x 10 states, ~300 MB); the check adds room for WAL and index-build sorts.
BYTES_PER_JOB = 1600
FIXED_BYTES = 300 * 2**20
SPAN_MS = 30 * 24 * 3600 * 1000
console = Console()


def connect(url: str) -> psycopg.Connection:
    """Return an autocommit connection (each statement its own transaction)."""
    return psycopg.connect(url, autocommit=True)


def admin_url(url: str) -> str:
    """Return the URL of the server's `postgres` database (to create or drop `url`'s)."""
    return make_conninfo(url, dbname="postgres")


def db_name(url: str) -> str:
    """Return the database name of `url`."""
    return str(conninfo_to_dict(url)["dbname"])


def database_exists(url: str) -> bool:
    """Tell whether the database of `url` exists."""
    with connect(admin_url(url)) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db_name(url)])
        return found.fetchone() is not None


def recreate_database(url: str, drop_only: bool = False) -> None:
    """Drop the database of `url` (closing its sessions) and, unless `drop_only`, create it."""
    name = psycopg.sql.Identifier(db_name(url))
    with connect(admin_url(url)) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        if not drop_only:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(name))


def gib(n: float) -> str:
    """Return bytes as GiB text."""
    return f"{n / 2**30:.1f} GiB"


def disk_needed(url: str, rows: int) -> tuple[int, int, int, str]:
    """Return (final size, bytes needed, bytes free, where) for a fill of `rows` jobs."""
    with connect(admin_url(url)) as conn:
        where = str(conn.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
        wal = conn.execute("SELECT pg_size_bytes(current_setting('max_wal_size'))").fetchone()
    final = rows * BYTES_PER_JOB + FIXED_BYTES
    # Index builds sort into temporary files (up to the largest table's keys) and checkpoints
    # keep up to twice max_wal_size of WAL around under a bulk load.
    need = int(final * 1.3) + 2 * int(wal[0])  # type: ignore[index]
    path = Path(where)
    while not path.exists() and path != path.parent:
        path = path.parent
    return final, need, shutil.disk_usage(path).free, str(path)


def check_disk(url: str, rows: int) -> None:
    """Print what the fill needs; exit with a clear message when the disk is too small."""
    final, need, free, where = disk_needed(url, rows)
    console.print(
        f"fill of {rows:,} jobs: about {gib(final)} in the database ({BYTES_PER_JOB} bytes a job"
        f" with ~3 state changes, search text and indexes), {gib(need)} needed during the"
        f" fill; {gib(free)} free on {where}"
    )
    if free < need:
        raise SystemExit(
            f"not enough free disk for {rows:,} jobs: {gib(need)} needed, {gib(free)} free on"
            f" {where}. Free some space or pass a smaller --rows."
        )


@dataclass(frozen=True)
class Index:
    """A secondary index of a history table, as pg_indexes defines it."""

    table: str
    name: str
    definition: str
    constraint: bool  # backs a UNIQUE constraint (dropped and attached again as one)


def secondary_indexes(conn: psycopg.Connection) -> list[Index]:
    """Return every index of the history tables except the primary keys."""
    rows = conn.execute(
        """SELECT i.tablename, i.indexname, i.indexdef, c.contype IS NOT NULL
        FROM pg_indexes i LEFT JOIN pg_constraint c ON c.conname = i.indexname
        WHERE i.schemaname = current_schema() AND i.tablename = ANY(%s)
          AND c.contype IS DISTINCT FROM 'p' ORDER BY 1, 2""",
        [list(TABLES)],
    ).fetchall()
    return [Index(*row) for row in rows]


def drop_indexes(conn: psycopg.Connection, indexes: list[Index]) -> None:
    """Drop the indexes (constraints through ALTER TABLE)."""
    ident = psycopg.sql.Identifier
    for ix in indexes:
        if ix.constraint:
            sql = psycopg.sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}")
            conn.execute(sql.format(ident(ix.table), ident(ix.name)))
        else:
            conn.execute(psycopg.sql.SQL("DROP INDEX {}").format(ident(ix.name)))


@contextmanager
def pool(url: str, size: int, setup: tuple[str, ...]) -> Iterator[queue.Queue[psycopg.Connection]]:
    """Yield a queue of `size` connections, each set up with `setup` statements."""
    conns: queue.Queue[psycopg.Connection] = queue.Queue()
    made = []
    try:
        for _ in range(size):
            conn = connect(url)
            for statement in setup:
                conn.execute(statement)  # type: ignore[arg-type]
            made.append(conn)
            conns.put(conn)
        yield conns
    finally:
        for conn in made:
            conn.close()


def run_on(
    conns: queue.Queue[psycopg.Connection], work: Callable[[psycopg.Connection], None]
) -> None:
    """Run `work` on a connection taken from `conns`, then give it back."""
    conn = conns.get()
    try:
        work(conn)
    finally:
        conns.put(conn)


def progress() -> Progress:
    """Return the fill's rich progress display."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def load(url: str, rows: int, jobs: int, chunk: int) -> int:
    """Insert `rows` jobs (with their state changes) and search texts, `chunk` jobs a statement.

    Return how many state changes (events) were made.
    """
    start_ms = int(time.time() * 1000) - SPAN_MS
    ranges = [(a, min(a + chunk, rows)) for a in range(0, rows, chunk)]
    setup = ("SET synchronous_commit = off", "SET work_mem = '512MB'")
    events = [0]
    lock = threading.Lock()
    with pool(url, jobs, setup) as conns, progress() as bar, ThreadPoolExecutor(jobs) as ex:
        task = bar.add_task("jobs (with ~3 state changes each)", total=rows)

        def one(a: int, b: int) -> None:
            def work(conn: psycopg.Connection) -> None:
                cursor = conn.execute(
                    data.CHUNK_SQL,  # type: ignore[arg-type]
                    data.chunk_params(a, b, rows, start_ms, SPAN_MS),
                )
                made = int(cursor.fetchone()[0])  # type: ignore[index]
                with lock:
                    events[0] += made

            run_on(conns, work)
            bar.advance(task, b - a)

        for future in [ex.submit(one, a, b) for a, b in ranges]:
            future.result()
    return events[0]


def add_extras(url: str) -> None:
    """Sum the per-minute counts from the state changes; add a few worker and queue rows."""
    now = "now()"
    with connect(url) as conn:
        conn.execute("SET work_mem = '1GB'")
        conn.execute(data.MINUTES_SQL)  # type: ignore[arg-type]
        for i, worker in enumerate(data.WORKERS):
            host, pid, _ = worker.split(":")
            conn.execute(
                "INSERT INTO jobsite_workerrecord (id, host, pid, queues, concurrency,"
                f" current_jobs, started_at, heartbeat_at, role) VALUES (%s, %s, %s, %s, 50,"
                f" '[]', {now} - interval '2 days', {now}, '')",
                [worker, host, int(pid), ",".join(data.QUEUES[i % 5 :] or data.QUEUES)],
            )
        for name in data.QUEUES:
            conn.execute(
                "INSERT INTO jobsite_queuerecord (name, paused, submitted, scheduled, started,"
                f" dlq, updated_at) VALUES (%s, false, 0, 0, 0, 0, {now})",
                [name],
            )


def _weight(ix: Index) -> tuple[bool, int]:
    """Return a sort key that starts the longest builds first (trigram GIN, then job rows)."""
    return "USING gin" in ix.definition, -TABLES.index(ix.table)


def _watch(monitor: psycopg.Connection, pids: dict[int, str], bar: Progress, tasks: dict) -> None:
    """Show each running build's phase and how far it got (pg_stat_progress_create_index)."""
    rows = monitor.execute(
        "SELECT pid, phase, blocks_total, blocks_done, tuples_total, tuples_done"
        " FROM pg_stat_progress_create_index WHERE pid = ANY(%s)",
        [list(pids)],
    ).fetchall()
    for pid, phase, blocks_total, blocks_done, tuples_total, tuples_done in rows:
        name = pids[pid]
        total, done = (
            (blocks_total, blocks_done) if "scanning" in phase else (tuples_total, tuples_done)
        )
        step = phase.removeprefix("building index: ")
        bar.update(tasks[name], description=f"{name}: {step}", total=total or None, completed=done)


def rebuild_indexes(url: str, indexes: list[Index], jobs: int) -> None:
    """Build the saved indexes again, `jobs` at a time, showing each build's progress."""
    order = sorted(indexes, key=_weight, reverse=True)
    setup = ("SET maintenance_work_mem = '2GB'", "SET max_parallel_maintenance_workers = 0")
    pids: dict[int, str] = {}
    with (
        pool(url, jobs, setup) as conns,
        progress() as bar,
        ThreadPoolExecutor(jobs) as ex,
        connect(url) as monitor,
    ):
        tasks = {ix.name: bar.add_task(ix.name, total=None, start=False) for ix in order}

        def build(ix: Index) -> None:
            def work(conn: psycopg.Connection) -> None:
                pids[conn.info.backend_pid] = ix.name
                bar.start_task(tasks[ix.name])
                conn.execute(ix.definition)  # type: ignore[arg-type]

            run_on(conns, work)
            bar.update(tasks[ix.name], description=f"{ix.name}: done", total=1, completed=1)

        futures: list[Future[None]] = [ex.submit(build, ix) for ix in order]
        while not all(f.done() for f in futures):
            _watch(monitor, pids, bar, tasks)
            time.sleep(0.5)
        for future in futures:
            future.result()
        ident = psycopg.sql.Identifier
        for ix in order:
            if ix.constraint:
                sql = psycopg.sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} UNIQUE USING INDEX {}")
                monitor.execute(sql.format(ident(ix.table), ident(ix.name), ident(ix.name)))


def vacuum(url: str, jobs: int) -> None:
    """VACUUM ANALYZE the history tables, `jobs` at a time."""
    with pool(url, jobs, ()) as conns, progress() as bar, ThreadPoolExecutor(jobs) as ex:
        tasks = {t: bar.add_task(f"VACUUM ANALYZE {t}", total=None, start=False) for t in TABLES}

        def one(table: str) -> None:
            def work(conn: psycopg.Connection) -> None:
                bar.start_task(tasks[table])
                conn.execute(
                    psycopg.sql.SQL("VACUUM ANALYZE {}").format(psycopg.sql.Identifier(table))
                )

            run_on(conns, work)
            bar.update(tasks[table], total=1, completed=1)

        for future in [ex.submit(one, t) for t in TABLES]:
            future.result()


def verify(url: str) -> None:
    """Check sampled rows against jobsite.jobs.history.rows: search texts and state changes."""
    import orjson

    from engine.stream.events import Event
    from jobsite.jobs.history.rows import search_text, transition

    with connect(url) as conn:
        rows = conn.execute(
            "(SELECT r.id, r.queue, task, args, kwargs, errors, transitions, s.text"
            " FROM jobsite_jobrecord r JOIN jobsite_jobsearch s ON s.job_id = r.id"
            " WHERE state = 'failed' LIMIT 50) UNION ALL (SELECT r.id, r.queue, task, args,"
            " kwargs, errors, transitions, s.text FROM jobsite_jobrecord r"
            " JOIN jobsite_jobsearch s ON s.job_id = r.id ORDER BY r.id DESC LIMIT 50)"
        ).fetchall()
    for job_id, queue_name, task, args, kwargs, errors, transitions, text in rows:
        dumped = orjson.dumps(args).decode(), orjson.dumps(kwargs).decode()
        want = search_text(task, *dumped, errors)
        if text != want:
            raise SystemExit(f"search text of {job_id} differs:\n{text!r}\n{want!r}")
        for t in transitions:
            event = Event(
                queue_name,
                t["id"],
                job_id,
                t["from"],
                t["to"],
                t["at_ms"],
                t["attempt"],
                t["worker"],
                t["error"],
            )
            if transition(event) != t:
                raise SystemExit(f"state change of {job_id} differs: {t} {transition(event)}")


def read_info(url: str) -> dict[str, object] | None:
    """Return what the last complete fill of this database recorded, if any."""
    if not database_exists(url):
        return None
    with connect(url) as conn:
        if conn.execute("SELECT to_regclass('bench_history_info')").fetchone()[0] is None:  # type: ignore[index]
            return None
        row = conn.execute("SELECT info FROM bench_history_info").fetchone()
    return row[0] if row else None


def write_info(url: str, info: dict[str, object]) -> None:
    """Record a complete fill (what --reuse checks)."""
    with connect(url) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_history_info (info jsonb NOT NULL)")
        conn.execute("DELETE FROM bench_history_info")
        conn.execute("INSERT INTO bench_history_info VALUES (%s)", [psycopg.types.json.Jsonb(info)])


def database_bytes(url: str) -> int:
    """Return the size of the database of `url`."""
    with connect(url) as conn:
        return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])  # type: ignore[index]


def fill(url: str, rows: int, jobs: int, chunk: int) -> dict[str, object]:
    """Fill a migrated, empty database with `rows` jobs; return sizes and phase times."""
    phases: dict[str, float] = {}
    empty = database_bytes(url)
    with connect(url) as conn:
        indexes = secondary_indexes(conn)
        drop_indexes(conn, indexes)
    console.print(f"dropped {len(indexes)} secondary indexes: {', '.join(i.name for i in indexes)}")
    t = time.monotonic()
    events = load(url, rows, jobs, chunk)
    phases["rows"] = time.monotonic() - t
    t = time.monotonic()
    add_extras(url)
    phases["minute counts"] = time.monotonic() - t
    t = time.monotonic()
    rebuild_indexes(url, indexes, jobs)
    phases["indexes"] = time.monotonic() - t
    t = time.monotonic()
    vacuum(url, jobs)
    phases["vacuum analyze"] = time.monotonic() - t
    verify(url)
    size = database_bytes(url)
    return {
        "rows": rows,
        "events": events,
        "db_bytes": size,
        "bytes_per_job": round((size - empty) / max(rows, 1)),
        "phases_s": {k: round(v, 1) for k, v in phases.items()},
    }
