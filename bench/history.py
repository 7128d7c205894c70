"""The history on PostgreSQL at engine speed and at 10 million jobs.

`python -m bench.history [--rows 10000000]` (run by `bin/bench-history`): checks the free disk,
fills a fresh PostgreSQL database with a realistic history (bench.history_fill), times the
API, dashboard and admin queries against it in-process (bench.history_time), times the mirror
draining a backlog and keeping up with 5,000 jobs/s (bench.history_mirror), and writes the
"history" section of docs/benchmarks.md. The database is dropped at the end unless `--keep`
(or `--reuse` found it filled already: then it stays).
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import history_fill as fill  # noqa: E402
from bench.history_fill import console, gib  # noqa: E402


def parse(argv: list[str]) -> argparse.Namespace:
    """Return the command line options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--rows", type=int, help="jobs in the history (default 10,000,000; SQLite 1,000,000)"
    )
    p.add_argument("--database-url", default=fill.DEFAULT_URL)
    p.add_argument("--keep", action="store_true", help="keep the database afterwards")
    p.add_argument(
        "--reuse", action="store_true", help="skip the fill if the database holds --rows jobs"
    )
    p.add_argument("--skip-mirror", action="store_true", help="do not time the mirror")
    p.add_argument("--skip-queries", action="store_true", help="do not time the queries")
    p.add_argument("--sqlite", metavar="PATH", help="fill and time an SQLite file instead")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel statements")
    p.add_argument("--chunk", type=int, default=500_000, help="jobs per INSERT statement")
    p.add_argument("--drain-jobs", type=int, default=100_000, help="jobs in the mirror backlog")
    p.add_argument("--rate", type=int, default=5000, help="jobs/s of the mirror lag run")
    p.add_argument("--seconds", type=float, default=20, help="length of the mirror lag run")
    p.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    args = p.parse_args(argv)
    if args.rows is None:
        args.rows = 1_000_000 if args.sqlite else 10_000_000
    return args


def setup_django(db_url: str, redis_url: str) -> None:
    """Point the demo settings at the benchmark database and Redis; set Django up."""
    os.environ.update(
        DATABASE_URL=db_url,
        REDIS_URL=redis_url,
        DJANGO_SETTINGS_MODULE="demo.settings",
        DJANGO_SECRET_KEY=os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(50),
        DJANGO_HTTPS="0",
        DJANGO_DEBUG="0",
        DJANGO_ALLOWED_HOSTS="testserver,localhost,127.0.0.1",
    )
    import warnings

    import django

    # WhiteNoise warns that var/static (collectstatic's output) does not exist: not needed here.
    warnings.filterwarnings("ignore", message="No directory at")
    django.setup()


def known_queues(redis_url: str) -> None:
    """Register the history's queues in Redis (the queues page lists what Redis knows)."""
    import redis

    from bench.history_data import QUEUES
    from engine.keys import queues_key

    with redis.Redis.from_url(redis_url) as r:
        r.sadd(queues_key("jobsite"), *QUEUES)


def filled_before(args: argparse.Namespace) -> dict[str, Any] | None:
    """Return the info of a complete fill of --rows jobs when --reuse may use it."""
    url = args.database_url
    info = fill.read_info(url) if args.reuse else None
    if info is not None and info.get("rows") == args.rows:
        console.print(f"reusing {fill.db_name(url)}: {args.rows:,} jobs filled {info['filled_at']}")
        return info
    if args.reuse:
        console.print(f"no complete fill of {args.rows:,} jobs in {fill.db_name(url)}: filling")
    return None


def make_history(args: argparse.Namespace) -> dict[str, Any]:
    """Create and fill the database; return what the fill recorded."""
    from django.core.management import call_command

    url = args.database_url

    start = time.monotonic()
    fill.recreate_database(url)
    call_command("migrate", verbosity=0)
    made = fill.fill(url, args.rows, args.jobs, args.chunk)
    made["fill_s"] = round(time.monotonic() - start, 1)
    made["filled_at"] = time.strftime("%Y-%m-%d %H:%M")
    fill.write_info(url, made)
    console.print(
        f"filled {args.rows:,} jobs and {made['events']:,} events in {made['fill_s']} s"
        f" ({made['phases_s']}); database {gib(made['db_bytes'])},"
        f" {made['bytes_per_job']} bytes a job"
    )
    return made


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    args = parse(sys.argv[1:] if argv is None else argv)
    command = " ".join(["bin/bench-history", *(sys.argv[1:] if argv is None else argv)])
    if args.sqlite:
        from bench.history_sqlite import main as sqlite_main

        return sqlite_main(args, command)
    from bench import history_report as report
    from bench import history_time
    from engine.dev.devserver import RedisServer

    info = filled_before(args)
    made = info is None
    if made:
        fill.check_disk(args.database_url, args.rows)
    with RedisServer() as server:
        setup_django(args.database_url, server.url)
        try:
            info = info or make_history(args)
            known_queues(server.url)
            load = os.getloadavg()[0]
            timings = [] if args.skip_queries else history_time.run(report.print_timing)
            mirror = None
            if not args.skip_mirror:
                from bench import history_mirror

                mirror = history_mirror.run(
                    args.database_url, server.url, args.drain_jobs, args.rate, args.seconds
                )
            rows = report.rows(info, timings, mirror, load)
            report.show(rows, timings)
            if not args.no_docs:
                report.write(info, rows, command, pg_version(args.database_url), "PostgreSQL")
            report.save_explains(timings)
        finally:
            from django.db import connections

            connections.close_all()
            if made and not args.keep:
                fill.recreate_database(args.database_url, drop_only=True)
                console.print(f"dropped {fill.db_name(args.database_url)} (--keep keeps it)")
    return 0


def pg_version(url: str) -> str:
    """Return the server's version line."""
    with fill.connect(url) as conn:
        return str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]


def machine() -> str:
    """Return a one-line description of this machine."""
    from bench.report import cpu_model, memory_total

    return f"{cpu_model()}, {os.cpu_count()} cores, {memory_total()} RAM, {platform.platform()}"


if __name__ == "__main__":
    sys.exit(main())
