"""Soak: one `runworker` (worker, mirror and the other loops) runs a long mix of jobs at a steady
rate; its resident memory and Redis' memory are recorded every 10 s.

    .venv/bin/python -m bench.soak [--jobs 1000000] [--rate 2000] [--quick] [--no-docs]
                                   [--database-url postgres://...]

A private redis-server (bench.procs) and `manage.py runworker` with the demo settings and
JOBSITE_TASK_MODULES=bench.soak_tasks (SQLite in a temp dir unless --database-url). This process
feeds `--jobs` jobs at `--rate` a second (the mix of bench.soak_tasks.MIX: no-op, sleeping 1-50 ms,
failing once then retried, failing for good into the DLQ, reporting progress and log lines) and
samples every `--sample-s`: the runworker's VmRSS (its child processes apart), Redis
`used_memory`, jobs done and the mirror's backlog. At the end it waits for the queue to drain and
the mirror to catch up, then reports RSS growth after warm-up (from the first sample with 10 %
of the jobs done and WARM_MIN_S behind it, to the last; target < 10 MiB), Redis memory at the
start and the end, what the retained results take (the memory deleting them frees; MEMORY
USAGE, sampled per kind of key, as a cross-check) and what is left once they are deleted, the
rows in the history (counted in the database) against the jobs fed, and a plot
(docs/img/soak.svg). Writes the "soak" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import secrets
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

from bench.procs import start_group, start_redis, stop_group, stop_groups

ROOT = Path(__file__).resolve().parent.parent
SVG = ROOT / "docs" / "img" / "soak.svg"
QUEUE = "default"
GROUP = "mirror"
TARGET_GROWTH_MIB = 10.0
WARM_FRACTION = 0.10
# Warm-up lasts at least this long whatever the rate: runworker's periodic loops (reconciliation,
# retention, the mirror's give-back) run a minute apart, and the first pass of each adds what it
# keeps for the process's life (reconciliation's first pass about 4 MiB). At 2,000 jobs/s on a
# fast host 10 % of the jobs took 50 s, before any of them had run.
WARM_MIN_S = 120.0
# Redis' dict entries are 24 bytes, which jemalloc serves from its 32-byte class: a key with a
# ttl has one in the expires dict, which MEMORY USAGE leaves out, and MEMORY USAGE counts 24 for
# the key's own entry in the main dict.
EXPIRES_ENTRY_BYTES = 32
MAIN_ENTRY_SLACK_BYTES = 8
# runworker's loops other than the mirror (--mirror-apart runs the mirror in its own runworker).
LOOPS_BESIDE_MIRROR = ("worker", "relay", "reconcile", "retention", "depth", "health")


@dataclass(frozen=True)
class Sample:
    t_s: float
    fed: int
    done: int
    rss_kib: int
    children_rss_kib: int
    mirror_rss_kib: int  # the mirror's own runworker with --mirror-apart, else 0
    children: int
    redis_used_bytes: int
    live: int
    backlog: int
    # The transition hooks' group (engine/periodic/transitions.py): runworker always has it.
    hooks_backlog: int = 0


def vm_rss_kib(pid: int) -> int:
    """Return VmRSS of `pid` in KiB (0 if it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    m = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else 0


def descendants(pid: int) -> list[int]:
    """Return the pids of every descendant of `pid` (from /proc/*/stat)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def worker_env(db_url: str, redis_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "demo.settings",
        # A benchmark's own throw-away key (nothing it signs outlives the run).
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": db_url,
        "REDIS_URL": redis_url,
        "JOBSITE_TASK_MODULES": "bench.soak_tasks",
    }


def history_rows(db_url: str) -> dict[str, int]:
    """Return the history's job rows by state, counted in the database."""
    sql = "SELECT state, COUNT(*) FROM jobsite_jobrecord GROUP BY state"
    if db_url.startswith("sqlite"):
        conn = sqlite3.connect(urlsplit(db_url).path, timeout=60)
        try:
            return {str(s): int(n) for s, n in conn.execute(sql).fetchall()}
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(db_url) as conn:
        return {str(s): int(n) for s, n in conn.execute(sql).fetchall()}


def key_kind(key: str) -> str:
    """Return the kind of a Redis key: its name with ids and per-job parts folded."""
    kind = re.sub(r":job:[0-9a-f]{32}\b.*", ":job:<id>", key)
    return re.sub(r"\b[0-9a-f]{32}\b", "<id>", kind)


def retained(r: redis.Redis, per_kind_sample: int = 2000) -> dict[str, dict[str, float]]:
    """Return, per kind of key, how many there are and the bytes they take: MEMORY USAGE of
    every key of a kind with at most `per_kind_sample` keys, else of a random sample of that
    many times the count."""
    kinds: dict[str, list[str]] = {}
    for key in r.scan_iter(count=5000):
        name = key.decode() if isinstance(key, bytes) else key
        kinds.setdefault(key_kind(name), []).append(name)
    out: dict[str, dict[str, float]] = {}
    for kind, keys in kinds.items():
        picked = keys if len(keys) <= per_kind_sample else random.sample(keys, per_kind_sample)
        pipe = r.pipeline(transaction=False)
        for key in picked:
            pipe.memory_usage(key, samples=0)
        sizes = [int(s or 0) for s in pipe.execute()]
        mean = sum(sizes) / len(sizes) if sizes else 0.0
        out[kind] = {"keys": len(keys), "bytes_each": mean, "bytes": mean * len(keys)}
    return out


def dict_tables_bytes(keys: int, with_ttl: int) -> int:
    """Return the bytes of Redis' main and expires hash tables' bucket arrays (8 bytes a
    bucket, a power of two at least the number of entries), not in MEMORY USAGE."""

    def table(n: int) -> int:
        return 8 * (1 << max(2, (n - 1).bit_length())) if n else 0

    return table(keys) + table(with_ttl)


def delete_retained(r: redis.Redis) -> int:
    """Delete every job hash and the DLQ (the retained results; the worker is stopped); return
    used_memory afterwards."""
    pipe = r.pipeline(transaction=False)
    for n, key in enumerate(r.scan_iter(match="*:job:*", count=5000), 1):
        pipe.unlink(key)
        if n % 5000 == 0:
            pipe.execute()
    pipe.execute()
    for key in list(r.scan_iter(match="*:dlq", count=5000)):
        r.unlink(key)
    time.sleep(1)  # UNLINK frees big values in the background
    return int(r.info("memory")["used_memory"])


async def mirror_ready(r: Any, stream: str) -> bool:
    """Return whether the mirror's consumer group exists on `stream`."""
    if not await r.exists(stream):
        return False
    return any(g["name"] == GROUP for g in await r.xinfo_groups(stream))


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Start Redis and the runworker, feed the jobs, sample; return the results."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from bench import soak_tasks
    from engine import Client, EngineSettings
    from engine.ops import gaps as gap_counters
    from engine.resources.metrics import mirror_lag

    db_url = args.database_url or f"sqlite:///{tmp}/soak.sqlite3"
    server = start_redis(tmp)
    worker: subprocess.Popen[bytes] | None = None
    procs: list[subprocess.Popen[bytes]] = []
    try:
        env = worker_env(db_url, server.url)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
        argv = [sys.executable, "manage.py", "runworker", "--concurrency", str(args.concurrency)]
        if args.mirror_apart:
            argv += ["--only", ",".join(LOOPS_BESIDE_MIRROR)]
            mirror_argv = [sys.executable, "manage.py", "runworker", "--only", "mirror"]
            procs.append(start_group(mirror_argv, env, ROOT, tmp / "mirror.log"))
        worker = start_group(argv, env, ROOT, tmp / "runworker.log")
        procs.append(worker)
        settings = EngineSettings.from_url(server.url)
        sync_redis = redis.Redis.from_url(server.url)
        async with Client(settings) as client:
            keys = client.keys(QUEUE)
            deadline = time.monotonic() + 60
            while not await mirror_ready(client.redis, keys.events):
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"runworker did not start: see {tmp / 'runworker.log'}")
                await asyncio.sleep(0.2)
            await asyncio.sleep(2)  # its loops settle
            start_used = int(sync_redis.info("memory")["used_memory"])
            samples: list[Sample] = []
            fed = 0
            t0 = time.monotonic()

            async def sample() -> Sample:
                ((_, counts),) = await client.queues.states([QUEUE])
                done = sum(v for k, v in counts.items() if k.endswith("_total"))
                live = counts["submitted"] + counts["started"] + counts["scheduled"]
                now_ms = int(time.time() * 1000)
                _, backlog, _ = await mirror_lag(client.redis, keys, GROUP, now_ms)
                _, hooks_backlog, _ = await mirror_lag(client.redis, keys, "hooks", now_ms)
                kids = descendants(worker.pid)  # type: ignore[union-attr]
                info = await client.redis.info("memory")
                s = Sample(
                    t_s=round(time.monotonic() - t0, 1),
                    fed=fed,
                    done=done,
                    rss_kib=vm_rss_kib(worker.pid),  # type: ignore[union-attr]
                    children_rss_kib=sum(vm_rss_kib(p) for p in kids),
                    children=len(kids),
                    mirror_rss_kib=vm_rss_kib(procs[0].pid) if args.mirror_apart else 0,
                    redis_used_bytes=int(info["used_memory"]),
                    live=live,
                    backlog=backlog,
                    hooks_backlog=hooks_backlog,
                )
                samples.append(s)
                return s

            def line(s: Sample) -> str:
                return (
                    f"fed={s.fed:,} done={s.done:,} live={s.live:,} backlog={s.backlog:,}"
                    f" hooks_backlog={s.hooks_backlog:,}"
                    f" rss_mib={s.rss_kib / 1024:.1f} children_rss_mib="
                    f"{s.children_rss_kib / 1024:.1f} mirror_rss_mib={s.mirror_rss_kib / 1024:.1f}"
                    f" redis_mib={s.redis_used_bytes / 2**20:.1f}"
                )

            first = await sample()
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed:,}/{task.total:,}"),
                TimeElapsedColumn(),
                TextColumn("{task.fields[line]}"),
            ) as progress:
                bar = progress.add_task("soak", total=args.jobs, line=line(first))

                async def sampler() -> None:
                    while True:
                        await asyncio.sleep(args.sample_s)
                        s = await sample()
                        progress.update(bar, completed=s.done, line=line(s))
                        if any(proc.poll() is not None for proc in procs):
                            raise RuntimeError(f"a runworker exited: see the logs in {tmp}")

                sampling = asyncio.create_task(sampler())
                batch = max(1, args.rate // 100)
                feed_start = time.monotonic()
                while fed < args.jobs:
                    n = min(batch, args.jobs - fed)
                    await client.enqueue_many([soak_tasks.call(fed + i) for i in range(n)])
                    fed += n
                    ahead = feed_start + fed / args.rate - time.monotonic()
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                    if sampling.done():
                        sampling.result()
                feed_s = time.monotonic() - feed_start
                progress.update(bar, description="drain")
                deadline = time.monotonic() + args.drain_timeout_s
                while True:
                    ((_, counts),) = await client.queues.states([QUEUE])
                    live = counts["submitted"] + counts["started"] + counts["scheduled"]
                    now_ms = int(time.time() * 1000)
                    _, backlog, _ = await mirror_lag(client.redis, keys, GROUP, now_ms)
                    _, hooks, _ = await mirror_lag(client.redis, keys, "hooks", now_ms)
                    # The history is whole once the mirror read every event and rebuilt every
                    # job whose events the hard cap trimmed unread (the missed SET, trim-3.lua,
                    # and those past its limit, which a resync rebuilds).
                    missed = int(await client.redis.scard(keys.missed))
                    stats = await client.redis.hgetall(keys.stats)
                    missed += gap_counters.uncovered(stats)  # a resync to come
                    if live == 0 and backlog == 0 and hooks == 0 and missed == 0:
                        break
                    if time.monotonic() > deadline or sampling.done():
                        sampling.cancel()
                        raise RuntimeError(
                            f"not drained: live={live} backlog={backlog} hooks_backlog={hooks}"
                            f" missed={missed}"
                        )
                    await asyncio.sleep(0.5)
                drain_s = time.monotonic() - feed_start - feed_s
                sampling.cancel()
                await asyncio.sleep(args.settle_s)  # the last batch's clean-up, the trims
                last = await sample()
                progress.update(bar, completed=last.done, line=line(last))
            counts = (await client.queues.states([QUEUE]))[0][1]
            stats = await client.redis.hgetall(keys.stats)
            gaps = {f: int(stats.get(f, 0)) for f in gap_counters.GAP_FIELDS}
        end_used = int(sync_redis.info("memory")["used_memory"])
        kinds = retained(sync_redis)
        dbsize = int(sync_redis.dbsize())
        with_ttl = int(
            next(iter(sync_redis.info("keyspace").values()), {}).get("expires", 0)  # type: ignore[union-attr]
        )
        rows = history_rows(db_url)
        stop_groups(procs, grace_s=30)
        after_delete = delete_retained(sync_redis)
        sync_redis.close()
    finally:
        stop_groups(procs, grace_s=30)
        stop_group(server.proc)
    return {
        "jobs": args.jobs,
        "rate": args.rate,
        "concurrency": args.concurrency,
        "database": "PostgreSQL" if db_url.startswith("postgres") else "SQLite",
        "feed_s": round(feed_s, 1),
        "fed_per_s": round(fed / feed_s) if feed_s else 0,
        "drain_s": round(drain_s, 1),
        "start_used_bytes": start_used,
        "end_used_bytes": end_used,
        "retained": kinds,
        "dict_tables_bytes": dict_tables_bytes(dbsize, with_ttl),
        "dict_entries_bytes": EXPIRES_ENTRY_BYTES * with_ttl + MAIN_ENTRY_SLACK_BYTES * dbsize,
        "after_delete_used_bytes": after_delete,
        "mirror_apart": args.mirror_apart,
        "keys": dbsize,
        "rows": rows,
        "counts": {k: v for k, v in counts.items() if v},
        "gaps": gaps,
        "samples": [asdict(s) for s in samples],
    }


def gap_line(gaps: dict[str, int]) -> str:
    """Say what the hard cap on the event stream cost the history (the queue's gap counters)."""
    if not gaps.get("gap_entries"):
        return "The mirror read every event: none was trimmed before it did (no gap)."
    return (
        f"The mirror fell more than the hard cap (`events_maxlen`) behind: the cleaner trimmed"
        f" {gaps['gap_entries']:,} events before it read them, recording"
        f" {gaps.get('gap_jobs', 0):,} jobs for it to rebuild from their hashes (rebuilt"
        f" {gaps.get('gap_rebuilt', 0):,}, lost {gaps.get('gap_lost', 0):,}) and counting"
        f" {gaps.get('gap_unrecorded', 0):,} beyond the missed set's limit, which a resync of"
        f" every job hash rebuilt ({gaps.get('gap_resynced', 0):,}; stats `gap_*`)."
    )


def growth(samples: list[dict[str, Any]], jobs: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the first sample past warm-up (WARM_FRACTION of the jobs done, WARM_MIN_S gone;
    a run shorter than that: the first with the jobs done), and the last sample."""
    done = [s for s in samples if s["done"] >= jobs * WARM_FRACTION] or samples
    warm = next((s for s in done if s["t_s"] >= WARM_MIN_S), done[0])
    return warm, samples[-1]


def nice_step(raw: float) -> float:
    """Return the smallest of 1, 2, 5 times a power of ten at least `raw`."""
    if raw <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)


def svg_plot(samples: list[dict[str, Any]], title: str) -> str:
    """Return an SVG against seconds since the feed began, three panels: the runworker's RSS
    (its child processes' and a separate mirror's beside it) in MiB, Redis used_memory in MiB,
    and the mirror's backlog and the live jobs in thousands."""

    def line(name: str, field: str, scale: float, color: str) -> tuple[str, list[float], str]:
        return name, [s[field] / scale for s in samples], color

    rss = [line("runworker", "rss_kib", 1024, "#1f77b4")]
    if any(s["children_rss_kib"] for s in samples):
        rss.append(line("its child processes", "children_rss_kib", 1024, "#ff7f0e"))
    if any(s.get("mirror_rss_kib") for s in samples):
        rss.append(line("mirror runworker", "mirror_rss_kib", 1024, "#9467bd"))
    series = [
        ("runworker RSS, MiB", rss),
        ("Redis used_memory, MiB", [line("used_memory", "redis_used_bytes", 2**20, "#2ca02c")]),
        (
            "thousands",
            [
                line("mirror backlog, events", "backlog", 1000, "#d62728"),
                line("live jobs", "live", 1000, "#7f7f7f"),
            ],
        ),
    ]
    left, right, top, gap, panel, width = 70, 20, 40, 60, 160, 760
    height = top + len(series) * (panel + gap)
    xs = [float(s["t_s"]) for s in samples]
    x_max = max(xs[-1], 1.0)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="13">{title}</text>',
    ]
    plot_w = width - left - right
    for index, (label, lines) in enumerate(series):
        y0 = top + index * (panel + gap)
        y_max = max(max(v) for _, v, _ in lines) * 1.1 or 1.0
        step = nice_step(y_max / 4)
        digits = max(0, -math.floor(math.log10(step)))

        def px(x: float) -> float:
            return left + plot_w * x / x_max

        def py(y: float, y0: float = y0, y_max: float = y_max) -> float:
            return y0 + panel - panel * y / y_max

        out.append(
            f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{panel}" fill="none"'
            ' stroke="#999"/>'
        )
        tick = 0.0
        while tick <= y_max:
            y = py(tick)
            out.append(
                f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eee"/>'
            )
            out.append(
                f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:,.{digits}f}</text>'
            )
            tick += step
        out.append(
            f'<text x="16" y="{y0 + panel / 2}" text-anchor="middle"'
            f' transform="rotate(-90 16 {y0 + panel / 2})">{label}</text>'
        )
        for n in range(6):
            x_val = x_max * n / 5
            out.append(
                f'<text x="{px(x_val):.1f}" y="{y0 + panel + 14}" text-anchor="middle">'
                f"{x_val:,.0f}</text>"
            )
        for at, (name, values, color) in enumerate(lines):
            points = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in zip(xs, values, strict=True))
            out.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{points}"/>'
            )
            out.append(
                f'<text x="{left + 8 + 170 * at}" y="{y0 + 14}" fill="{color}">{name}</text>'
            )
        out.append(
            f'<text x="{left + plot_w / 2}" y="{y0 + panel + 30}" text-anchor="middle">'
            "seconds since the feed began</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def report(result: dict[str, Any], command: str, svg_rel: str | None) -> str:
    """Return the markdown section of a soak run."""
    samples = result["samples"]
    warm, last = growth(samples, result["jobs"])
    rss_growth = (last["rss_kib"] - warm["rss_kib"]) / 1024
    peak = max(s["rss_kib"] for s in samples) / 1024
    kids_peak = max(s["children_rss_kib"] for s in samples) / 1024
    backlog_peak = max(s["backlog"] for s in samples)
    hooks_peak = max(s.get("hooks_backlog", 0) for s in samples)
    live_peak = max(s["live"] for s in samples)
    mib = 2**20
    start, end = result["start_used_bytes"], result["end_used_bytes"]
    kinds = result["retained"]
    # What the jobs fed left behind on purpose: their hashes (results kept a day) and the DLQ.
    kept = sum(k["bytes"] for kind, k in kinds.items() if kind.endswith((":job:<id>", ":dlq")))
    explained = kept + result["dict_tables_bytes"] + result["dict_entries_bytes"]
    after = result["after_delete_used_bytes"]
    third = next(s for s in samples if s["t_s"] >= last["t_s"] * 2 / 3)
    kids = max(s["children"] for s in samples)
    rows = result["rows"]
    fed = result["jobs"]
    row_total = sum(rows.values())
    top = sorted(kinds.items(), key=lambda kv: -kv[1]["bytes"])[:6]
    lines = [
        "## Soak: one runworker for a long mix of jobs",
        "",
        f"`{command}`, {time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} cores shared with"
        f" other work: one `manage.py runworker` (every loop: worker, mirror, relay, reconcile,"
        f" retention, depth, health; demo settings, concurrency {result['concurrency']},"
        f" {result['database']}) on a private redis-server; this process fed {fed:,} jobs at"
        f" {result['rate']:,}/s (achieved {result['fed_per_s']:,}/s over {result['feed_s']:,} s;"
        f" drained and mirrored {result['drain_s']:,} s later), the mix of bench/soak_tasks.py:"
        " 50 % no-op, 30 % asyncio.sleep 1-50 ms, 10 % failing on attempt 1 and retried (50 ms),"
        " 8 % three `job.log` lines and three `job.set_progress`, 2 % failing for good (DLQ).",
        "",
        "| figure | value | target |",
        "|---|---:|---|",
        f"| runworker RSS after warm-up ({WARM_FRACTION:.0%} of the jobs done and"
        f" {WARM_MIN_S:.0f} s gone: t={warm['t_s']:,} s) |"
        f" {warm['rss_kib'] / 1024:.1f} MiB | |",
        f"| runworker RSS at the end, drained and mirrored (t={last['t_s']:,} s) |"
        f" {last['rss_kib'] / 1024:.1f} MiB | |",
        f"| RSS growth after warm-up | {rss_growth:+.1f} MiB |"
        f" < {TARGET_GROWTH_MIB:g} MiB: {'met' if rss_growth < TARGET_GROWTH_MIB else 'missed'} |",
        f"| runworker RSS growth over the last third (t={third['t_s']:,} s to the end) |"
        f" {(last['rss_kib'] - third['rss_kib']) / 1024:+.1f} MiB | |",
        f"| runworker RSS peak | {peak:.1f} MiB | |",
        f"| child processes' RSS peak (isolation; {kids} at most) | {kids_peak:.1f} MiB | |",
        f"| most jobs live (waiting, running, retry due) at a sample | {live_peak:,} | |",
        f"| largest mirror backlog at a sample | {backlog_peak:,} events | |",
        f"| largest transition hooks' backlog at a sample | {hooks_peak:,} events | |",
        f"| Redis used_memory before the feed | {start / mib:.1f} MiB | |",
        f"| Redis used_memory at the end | {end / mib:.1f} MiB | |",
        f"| retained results (job hashes and the DLQ), as deleting them freed |"
        f" {(end - after) / mib:.1f} MiB ({(end - after) / max(1, fed):,.0f} B a job) | |",
        f"| the same, estimated: MEMORY USAGE of the keys + Redis' key tables and dict entries |"
        f" {explained / mib:.1f} MiB ({(explained - (end - after)) / max(1, fed):+.0f} B a job"
        " against the freed) | |",
        f"| Redis used_memory once the worker stopped and the job hashes and DLQ were deleted |"
        f" {after / mib:.1f} MiB ({(after - start) / mib:+.1f} MiB from the start: end - start -"
        " retained) | the start's |",
        f"| job rows in the history (counted in the database) | {row_total:,} |"
        f" = jobs fed ({fed:,}): {'met' if row_total == fed else 'MISSED'} |",
        "",
        "Rows by state: " + ", ".join(f"{s} {n:,}" for s, n in sorted(rows.items())) + ".",
        "",
        gap_line(result.get("gaps", {})),
        "",
        "What Redis keeps at the end (results are kept a day: `result_ttl_s` 86,400), largest"
        " first: "
        + "; ".join(
            f"`{kind}` {k['keys']:,} key{'s' if k['keys'] != 1 else ''} x"
            f" {k['bytes_each']:,.0f} B = {k['bytes'] / mib:.1f} MiB"
            for kind, k in top
        )
        + f"; Redis' key and expiry tables (8 B a bucket, {result['keys']:,} keys)"
        f" {result['dict_tables_bytes'] / mib:.1f} MiB, and their dict entries beyond what MEMORY"
        f" USAGE counts {result['dict_entries_bytes'] / mib:.1f} MiB. Each kind's bytes are the"
        " mean `MEMORY USAGE key SAMPLES 0` of up to 2,000 random keys of that kind times their"
        " count; it counts a hash's field entries at 24 B where jemalloc serves 32.",
    ]
    if svg_rel:
        lines += ["", f"![runworker RSS and Redis memory over the soak]({svg_rel})"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=2000, help="jobs fed a second")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20,000 jobs")
    parser.add_argument("--concurrency", type=int, default=100, help="runworker --concurrency")
    parser.add_argument("--database-url", default="", help="default: SQLite in a temp dir")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--settle-s", type=float, default=15.0, help="wait after the drain")
    parser.add_argument("--drain-timeout-s", type=float, default=900.0)
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/ (print only)")
    parser.add_argument(
        "--mirror-apart", action="store_true", help="run the mirror in a runworker of its own"
    )
    parser.add_argument("--json", type=Path, help="also write the results and samples here")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs = 20_000
        args.sample_s = min(args.sample_s, 2.0)
        args.settle_s = min(args.settle_s, 5.0)
    command = "bin/bench-soak " + " ".join(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        try:
            result = asyncio.run(run(args, Path(tmp)))
        except Exception:
            log = Path(tmp) / "runworker.log"
            if log.exists():
                print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
            raise
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if not args.no_docs:
        title = f"bench.soak: {result['jobs']:,} jobs at {result['rate']:,}/s, one runworker"
        SVG.parent.mkdir(parents=True, exist_ok=True)
        SVG.write_text(svg_plot(result["samples"], title))
    from bench.report import publish

    svg_rel = None if args.no_docs else "img/soak.svg"
    publish("soak", report(result, command.strip(), svg_rel), docs=not args.no_docs)
    warm, last = growth(result["samples"], result["jobs"])
    rows = sum(result["rows"].values())
    print(
        f"soak jobs={result['jobs']} rows={rows} rss_growth_mib="
        f"{(last['rss_kib'] - warm['rss_kib']) / 1024:.1f} redis_start_mib="
        f"{result['start_used_bytes'] / 2**20:.1f} redis_end_mib="
        f"{result['end_used_bytes'] / 2**20:.1f}"
    )
    return 0 if rows == result["jobs"] else 1


if __name__ == "__main__":
    sys.exit(main())
