"""The least Redis memory a finished job can take while its record and its history are kept.

    .venv/bin/python -m bench.memory_floor [--jobs 10000] [--no-docs]

The engine keeps a finished job's record (its result) for the result ttl, a day by default, and
appends an event for every state change: a job that ran once leaves `submitted`, `started` and
`completed`. On a private redis-server this writes, for N jobs, only the parts of that which no
storage format can leave out, and reads `INFO memory used_memory` before and after each:

- one key a job, named like the engine's job keys, holding a single byte, with a ttl (Redis's
  own cost of a key that expires: its dictionary entries, the name, the value object);
- three stream entries a job carrying nothing but the job id and the state it reached.

Their sum, before the job's own fields (task, arguments, state, times, result), is the floor
under `bin/bench`'s "Redis mem / 10k jobs" for any design with a key per job and an event per
transition; `bench.where` splits the engine's own figure by structure.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

import redis

from bench.report import publish
from engine.dev.devserver import RedisServer

TARGET_MIB = 3.0
STATES = ("submitted", "started", "completed")
DAY_MS = 86_400_000


def _bytes_per_job(r: redis.Redis, jobs: int, write: str) -> float:
    """Return used_memory added per job by `write` ("keys" or "events") over `jobs` jobs."""
    r.flushall()
    before = int(r.info("memory")["used_memory"])
    pipe = r.pipeline(transaction=False)
    for n in range(jobs):
        job_id = uuid.uuid4().hex
        if write == "keys":
            pipe.set(f"jobsite:{{default}}:job:{job_id}", "x", px=DAY_MS)
        else:
            for state in STATES:
                pipe.xadd("jobsite:{default}:events", {"job": job_id, "to": state})
        if n % 1000 == 999:
            pipe.execute()
    pipe.execute()
    return (int(r.info("memory")["used_memory"]) - before) / jobs


def measure(port: int, jobs: int) -> dict[str, float]:
    """Return bytes per job of each part of the floor."""
    with redis.Redis(port=port) as r:
        return {
            "a key a job with a ttl, one byte in it": _bytes_per_job(r, jobs, "keys"),
            "three events a job, job id and state only": _bytes_per_job(r, jobs, "events"),
        }


def report(parts: dict[str, float], jobs: int) -> str:
    """Return the markdown section: each part, their sum, and the target beside it."""
    total = sum(parts.values())
    lines = [
        "## The floor under a finished job's memory",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M')} by `python -m bench.memory_floor --jobs"
        f" {jobs}`: only what no format can leave out while a job's record is kept for the"
        " result ttl and each of its three state changes has an event.",
        "",
        "| part | bytes a job | MiB per 10k jobs |",
        "|---|---:|---:|",
    ]
    for name, size in [*parts.items(), ("sum, before any field of the job", total)]:
        lines.append(f"| {name} | {size:.0f} | {size * 10_000 / 2**20:.2f} |")
    lines += [
        "",
        f"A target of {TARGET_MIB:g} MiB per 10,000 jobs leaves"
        f" {TARGET_MIB * 2**20 / 10_000:.0f} bytes a job; the floor takes {total:.0f} before the"
        " job's task, arguments, state, times and result are stored. `bench.where` splits the"
        " engine's own figure by structure.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory_floor", description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    args = parser.parse_args(argv)
    with RedisServer() as server:
        parts = measure(server.port, args.jobs)
    publish("memory-floor", report(parts, args.jobs), docs=not args.no_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
