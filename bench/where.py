"""Where a no-op job's time and memory go: Jobsite's worker beside the minimal loop.

    .venv/bin/python -m bench.where [--jobs 20000] [--runs 3]

For each system, on a private redis-server: enqueue N jobs in bulk, run one burst worker, and
report per job the wall time and the Redis time (the CPU time of Redis's main thread from INFO
cpu: the scripts, the commands they run and the I/O; start-up included), best of `--runs`; Redis
busy near 100 % means Redis bounds throughput. (INFO commandstats would count a script's own
commands twice: in the script's time and in theirs.)
One more run, with SLOWLOG recording every command, splits Jobsite's Redis time by script
(SLOWLOG itself slows Redis down, so only the shares are read from it). Then Redis memory per
finished job, split by structure (MEMORY USAGE).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import redis

from bench import procs
from bench.collect import read_probe
from bench.report import publish
from engine.seam.luasrc import load_sources

ROOT = Path(__file__).resolve().parent.parent


def _enqueue(url: str, system: str, n: int) -> None:
    argv = [sys.executable, "-m", "bench.client", system, "bulk", str(n)]
    subprocess.run(argv, check=True, cwd=ROOT, env={**os.environ, "BENCH_REDIS_URL": url})


def _worker(url: str, system: str, probe_dir: Path) -> None:
    if system == "jobsite":
        argv = [sys.executable, "-m", "engine", "worker", "--url", url, "--burst"]
        argv += ["--tasks", "bench.peers.jobsite_tasks", "--queues", "default"]
        argv += ["--concurrency", "200", "--log-level", "ERROR"]
    else:
        argv = [sys.executable, "-m", "bench.minimal_loop", "--url", url, "--burst"]
    env = {**os.environ, "BENCH_PROBE_DIR": str(probe_dir), "PYTHONWARNINGS": "ignore"}
    subprocess.run(argv, check=True, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)


def _redis_cpu_us(r: redis.Redis) -> float:
    cpu = r.info("cpu")
    return (cpu["used_cpu_user_main_thread"] + cpu["used_cpu_sys_main_thread"]) * 1e6


def one_run(r: redis.Redis, url: str, system: str, n: int) -> tuple[float, float]:
    """Return (wall µs, Redis µs) per job of one burst worker over n queued jobs."""
    r.flushall()
    _enqueue(url, system, n)
    cpu_before_us = _redis_cpu_us(r)
    with tempfile.TemporaryDirectory() as folder:
        _worker(url, system, Path(folder))
        totals = read_probe(Path(folder))
    if totals.count != n:
        raise RuntimeError(f"{system}: {totals.count} of {n} jobs ran")
    return totals.span_s / n * 1e6, (_redis_cpu_us(r) - cpu_before_us) / n


def script_shares(r: redis.Redis, url: str, n: int) -> dict[str, float]:
    """Return each script's share of Jobsite's Redis time, from SLOWLOG (every command)."""
    verbs = {
        hashlib.sha1(src.encode()).hexdigest(): verb for verb, (_, src) in load_sources().items()
    }
    r.flushall()
    _enqueue(url, "jobsite", n)
    r.config_set("slowlog-max-len", 4 * n * 20)
    r.config_set("slowlog-log-slower-than", 0)
    r.slowlog_reset()
    with tempfile.TemporaryDirectory() as folder:
        _worker(url, "jobsite", Path(folder))
    spent: Counter[str] = Counter()
    for entry in r.slowlog_get(4 * n * 20):
        words = entry["command"].split()
        if words[0].upper() == b"EVALSHA":
            spent[verbs.get(words[1].decode(), "other")] += entry["duration"]
    r.config_set("slowlog-log-slower-than", 10_000)
    total = sum(spent.values()) or 1
    return {verb: us / total for verb, us in spent.most_common()}


def memory_split(r: redis.Redis, url: str, n: int) -> dict[str, float]:
    """Return bytes per finished job: job hashes, events stream, other keys, and the total."""
    r.flushall()
    before = int(r.info("memory")["used_memory"])
    _enqueue(url, "jobsite", n)
    with tempfile.TemporaryDirectory() as folder:
        _worker(url, "jobsite", Path(folder))
    total = int(r.info("memory")["used_memory"]) - before
    by_kind: Counter[str] = Counter()
    for key in r.scan_iter(count=1000):
        kind = key.decode().rsplit(":", 2)[-2 if b":job:" in key else -1]
        by_kind[kind] += int(r.memory_usage(key, samples=0) or 0)
    out = {name: size / n for name, size in by_kind.most_common(4)}
    out["total (used_memory)"] = total / n
    return out


def measure(url: str, r: redis.Redis, jobs: int, runs: int) -> list[str]:
    """Return the report's lines: time per job, Redis time by script, memory by structure."""
    lines = [
        f"Generated {time.strftime('%Y-%m-%d %H:%M')} by `python -m bench.where --jobs {jobs}`"
        f" (best of {runs}).",
        "",
        "| system | wall µs/job | Redis µs/job | Redis busy | jobs/s |",
        "|---|---|---|---|---|",
    ]
    for system in ("jobsite", "minimal"):
        wall, red = min(one_run(r, url, system, jobs) for _ in range(runs))
        lines.append(
            f"| {system} | {wall:.1f} | {red:.1f} | {red / wall:.0%} | {1e6 / wall:,.0f} |"
        )
    shares = script_shares(r, url, jobs)
    lines += ["", "Jobsite's Redis time by script: "]
    lines[-1] += ", ".join(f"{verb} {share:.0%}" for verb, share in shares.items()) + "."
    split = memory_split(r, url, 10_000)
    lines += ["", "Redis bytes per finished job (10,000 jobs): "]
    lines[-1] += ", ".join(f"{name} {size:,.0f}" for name, size in split.items()) + "."
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.where", description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as run_dir:
        server = procs.start_redis(Path(run_dir))
        r = redis.Redis.from_url(server.url)
        try:
            lines = measure(server.url, r, args.jobs, args.runs)
        finally:
            r.close()
            procs.stop_group(server.proc)
    body = "\n".join(["## Where a no-op job's time and memory go", "", *lines, "", READING])
    publish("where", body, docs=not args.no_docs)
    return 0


READING = """Reading it: Redis busy near 100 % means the worker waits on Redis, so the Lua scripts'
cost per job bounds throughput, not the worker's Python. The minimal loop
(`bench/minimal_loop.py`) does a claim with a lease, a token-fenced completion and one
event per job; the engine's scripts per job (claim, which also begins a job that starts at
once, and complete) also keep
attempts, stalls, rate limits, concurrency keys, deadlines, flows, dedup ids, metrics
histograms and three events per job. The memory left per finished job is its hash
(kept for the result ttl, a day by default) and its share of the events stream (three
events a job; with no mirror the cleaner keeps 100,000 events, `events_kept_without_group`)."""


if __name__ == "__main__":
    sys.exit(main())
