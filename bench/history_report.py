"""The history benchmark's results: a rich table, the "history" section of docs/benchmarks.md,
and the EXPLAIN ANALYZE of every query that missed its target (under var/bench-history/)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.history_fill import console, gib
from bench.history_time import Timing

ROOT = Path(__file__).resolve().parent.parent
Row = tuple[str, str, str, str]
DRAIN_TARGET = 30_000
LAG_P99_MS = 1000.0


def _ok(good: bool) -> str:
    return "yes" if good else "**NO**"


def print_timing(t: Timing) -> None:
    """Print one probe's result as it lands."""
    if t.error:
        console.print(f"[red]{t.name}: {t.error}")
        return
    color = "green" if t.ok else "red"
    console.print(
        f"[{color}]{t.name}: p95 {t.p95_ms:.1f} ms[/] (p50 {t.p50_ms:.1f}, cold"
        f" {t.cold_ms:.1f}, {t.calls} warm calls; SQL {t.sql_ms:.1f} ms in {t.queries}"
        f" queries; target {t.target_ms:g} ms)"
    )


def timing_row(t: Timing) -> Row:
    """Return the table row of one probe."""
    if t.error:
        return (t.name, f"error: {t.error}", f"≤ {t.target_ms:g} ms", _ok(False))
    measured = (
        f"p95 {t.p95_ms:.1f} ms (p50 {t.p50_ms:.1f}, cold {t.cold_ms:.1f};"
        f" SQL {t.sql_ms:.0f} ms in {t.queries} queries"
    )
    measured += ")" if t.calls == 20 else f"; {t.calls} warm calls)"
    return (t.name, measured, f"≤ {t.target_ms:g} ms", _ok(t.ok))


def drain_rows(d: dict[str, Any]) -> list[Row]:
    """Return the rows of one drain run (steady or burst backlog)."""
    kind = {"steady": "a steady", "burst": "a burst"}.get(d.get("kind", ""), "a")
    apart = d.get("queues", 1)
    over = f" in {apart} queues, a mirror process each" if apart > 1 else ""
    if d.get("after_vacuum", False):
        over += (
            ", the first after a VACUUM (its rows also fill the free space VACUUM recorded in"
            " old pages, about one per page, each a full-page image in the WAL)"
        )
    rows: list[Row] = [
        (
            f"mirror drains {kind} backlog of {d['jobs']:,} jobs{over}",
            f"{d['events_per_s']:,} events/s ({d['events']:,} events in {d['seconds']} s)",
            f"≥ {DRAIN_TARGET:,} events/s",
            _ok(d["events_per_s"] >= DRAIN_TARGET),
        ),
        (
            "WAL written during the drain",
            (
                f"{d['wal_bytes_per_1000'] / 1024:,.0f} KiB per 1,000 events"
                if d["wal_bytes_per_1000"] is not None
                else "n/a"
            )
            + (f" ({d['wal_kinds']})" if d.get("wal_kinds") else ""),
            "(reported)",
            "",
        ),
    ]
    if d.get("split_s"):  # timed in this process only (not with a mirror process per queue)
        rows.insert(
            1,
            (
                "drain time by step",
                ", ".join(f"{k} {v:g} s" for k, v in d.get("split_s", {}).items())
                + " (write_batch holds the others and the commit; upsert_search runs on a"
                " connection of its own alongside upsert; prepare runs while the previous batch"
                " is written; the rest of the drain is reading Redis)",
                "(reported)",
                "",
            ),
        )
    return rows


def mirror_rows(mirror: dict[str, Any]) -> list[Row]:
    """Return the rows of the mirror's drain and lag runs."""
    lag = mirror["lag"]
    p99 = lag["p99_ms"]
    drains = [mirror[k] for k in ("first", "drain", "apart", "burst") if k in mirror]
    return [
        *(row for d in drains for row in drain_rows(d)),
        (
            f"mirror lag at {lag['rate']:,} jobs/s"
            f" ({lag['jobs']:,} jobs, {lag['events']:,} events)",
            f"p50 {lag['p50_ms']} ms, p99 {p99} ms, max {lag['max_ms']} ms",
            f"p99 < {LAG_P99_MS / 1000:g} s",
            _ok(p99 is not None and p99 < LAG_P99_MS),
        ),
        (
            "mirror backlog during the lag run",
            f"max {lag['backlog_max_1st']:,} (1st half), max {lag['backlog_max_2nd']:,} (2nd half)"
            + (
                f"; WAL {lag['wal_bytes_per_1000'] / 1024:,.0f} KiB per 1,000 events"
                if lag["wal_bytes_per_1000"] is not None
                else ""
            ),
            "flat",
            _ok(lag["backlog_flat"]),
        ),
    ]


def rows(
    info: dict[str, Any], timings: list[Timing], mirror: dict[str, Any] | None, load: float
) -> list[Row]:
    """Return every row of the results table (`load`: the 1-minute load average at the start)."""
    phases = ", ".join(f"{k} {v:g} s" for k, v in info["phases_s"].items())
    out: list[Row] = [
        (
            f"fill: {info['rows']:,} jobs, {info['events']:,} events (state changes)",
            f"{info['fill_s']:g} s ({phases})",
            "",
            "",
        ),
        (
            "database size",
            f"{gib(info['db_bytes'])} ({info['bytes_per_job']:,} bytes a job)",
            "",
            "",
        ),
    ]
    cores = os.cpu_count() or 1
    out.append(("machine load when the timing began", f"{load:.2f} on {cores} cores", "", ""))
    out += [timing_row(t) for t in timings]
    if mirror is not None:
        out += mirror_rows(mirror)
    return out


def show(table_rows: list[Row], timings: list[Timing]) -> None:
    """Print the results as a rich table."""
    table = Table(title="The history at scale")
    for name in ("what", "measured", "target", "ok?"):
        table.add_column(name)
    for what, measured, target, ok in table_rows:
        color = "red" if "NO" in ok else "green" if ok else ""
        table.add_row(what, measured, target, f"[{color}]{ok.strip('*')}[/]" if color else ok)
    console.print(table)


FILLS = {
    "PostgreSQL": "rows generated on the server in chunks with the secondary indexes dropped,"
    " then indexes built again, VACUUM ANALYZE.",
    "SQLite": "rows generated in Python and inserted with `executemany`, a transaction a"
    " chunk, with the secondary indexes dropped, then indexes built again, ANALYZE.",
}
MIRRORS = {
    "PostgreSQL": "Mirror: a backlog made by an in-process burst worker, drained by a fresh"
    " `Mirror`; the lag run is `bench.mirror_lag.measure` (feeder and worker processes; the"
    " feed starts once the worker has registered) against this database. WAL from"
    " `pg_current_wal_lsn()` (server-wide), split by kind with `pg_waldump --stats`.",
    "SQLite": "The mirror is not timed here (see the PostgreSQL section and mirror-lag).",
}


def write(
    info: dict[str, Any],
    table_rows: list[Row],
    command: str,
    version: str,
    db: str,
    section: str = "history",
) -> None:
    """Write section `section` of docs/benchmarks.md."""
    from bench.history import machine
    from bench.report import put_section

    lines = [
        f"## The history at {info['rows']:,} jobs ({db})",
        "",
        f"`{command}`, {time.strftime('%Y-%m-%d %H:%M')}. Machine: {machine()}; {db} {version}.",
        "",
        f"History: {info['rows']:,} jobs with {info['events']:,} state changes (events, kept in"
        " each row's `transitions`) over the last 30 days (92 % completed, 4 % failed with a"
        " ~1.6 kB traceback, the rest cancelled, expired, stalled, dropped and a few live;"
        " 5 queues, 40 tasks; UUIDv7 ids; one search text per job in `JobSearch`),"
        f" filled {info['filled_at']} in {info['fill_s']:g} s: {FILLS[db]}",
        "",
        "Queries: in-process Django (test client with a superuser's bearer token, the admin"
        " with a logged-in superuser, the dashboard's `live._history` called directly); the"
        " first call is `cold`, the figure is the p95 of 20 warm calls; `SQL` is the time the"
        f" queries of one more call took. {MIRRORS[db]}",
        "",
        "| what | measured | target | ok? |",
        "|---|---|---|---|",
        *(f"| {' | '.join(r)} |" for r in table_rows),
    ]
    put_section(ROOT / "docs/benchmarks.md", section, "\n".join(lines))
    console.print(f"wrote the {section} section of docs/benchmarks.md")


def save_explains(timings: list[Timing]) -> None:
    """Print and save EXPLAIN ANALYZE of every probe that missed its target."""
    missed = [t for t in timings if t.explain]
    if not missed:
        return
    out = ROOT / "var/bench-history" / f"explain-{time.strftime('%Y%m%d-%H%M%S')}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    text = "\n\n".join(
        f"## {t.name}: p95 {t.p95_ms:.1f} ms (target {t.target_ms:g} ms)\n\n```\n{t.explain}\n```"
        for t in missed
    )
    out.write_text(text + "\n")
    print(text)
    console.print(f"EXPLAIN ANALYZE of the {len(missed)} missed queries saved to {out}")
