"""Where one worker process spends its time on no-op jobs, sampled with py-spy.

    .venv/bin/pip install py-spy        # once: a sampling profiler, not a project dependency
    .venv/bin/python -m bench.worker_profile [--jobs 100000] [--rate 250] [--no-docs]

On a private redis-server: enqueue N jobs in bulk, run one burst worker (`python -m engine
worker --concurrency 200`) under `py-spy record --nonblocking`, and sort every sample by the
innermost frame that names a part of the work (PARTS; the event loop's own C code shows as the
frame that runs it). Sampling slows the worker down, so only the shares are read from it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.report import publish
from bench.where import _enqueue
from engine.dev.devserver import RedisServer

ROOT = Path(__file__).resolve().parent.parent

# (part, substrings of a frame's "function (file:line)"): the first part whose substring is in
# the innermost frame that has one decides; the order matters where files are shared.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("start-up: imports", ("<frozen importlib",)),
    ("packing commands", ("pack_command", "Serializer.pack")),
    (
        "redis-py: send, read, pool, retry",
        (
            "(redis/",
            "asyncio/streams.py",
            "asyncio/timeouts.py",
            "engine/transport/",
            "engine/seam/luasrc",
        ),
    ),
    ("the task and the benchmark's probe", ("bench/",)),
    ("claiming: claim replies into running jobs", ("engine/worker/claimer.py", "engine/job.py")),
    (
        "writing outcomes: completion batches",
        ("engine/worker/outcomes.py", "engine/worker/flusher.py"),
    ),
    (
        "running a job: asyncio task, runner, context",
        (
            "engine/running/runner.py",
            "engine/worker/unit.py",
            "engine/running/context.py",
            "asyncio/tasks.py",
        ),
    ),
    ("event loop: uvloop's own work (callbacks, epoll, sockets)", ("asyncio/runners.py",)),
)
OTHER = "other"


def part_of(stack: list[str]) -> str:
    """Return the part a sampled stack (outermost frame first) is counted under."""
    for frame in reversed(stack):
        for part, marks in PARTS:
            if any(mark in frame for mark in marks):
                return part
    return OTHER


def sample(url: str, rate: int, out: Path) -> None:
    """Run one burst worker under py-spy, writing its raw (collapsed) samples to `out`."""
    worker = [sys.executable, "-m", "engine", "worker", "--url", url, "--burst"]
    worker += ["--tasks", "bench.peers.jobsite_tasks", "--queues", "default"]
    worker += ["--concurrency", "200", "--log-level", "ERROR"]
    spy = str(Path(sys.executable).parent / "py-spy")
    argv = [spy, "record", "--nonblocking", "-r", str(rate), "-f", "raw", "-o", str(out), "--"]
    with tempfile.TemporaryDirectory() as probe_dir:
        env = {**os.environ, "BENCH_PROBE_DIR": probe_dir, "PYTHONWARNINGS": "ignore"}
        subprocess.run([*argv, *worker], check=True, cwd=ROOT, env=env, capture_output=True)


def shares(raw: Path) -> Counter[str]:
    """Return samples per part from py-spy's raw output ("frame;frame;... count" lines)."""
    counts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        counts[part_of(stack.split(";"))] += int(n)
    return counts


def report(counts: Counter[str], jobs: int, rate: int) -> str:
    """Return the markdown section: each part's share of the worker's samples."""
    total = sum(counts.values()) or 1
    lines = [
        "## Where a worker process spends its time",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M')} by `python -m bench.worker_profile"
        f" --jobs {jobs} --rate {rate}`: one burst worker on {jobs:,} queued no-op jobs, sampled"
        f" with py-spy ({total:,} samples).",
        "",
        "| part | share of samples | CPU µs a job, sampled |",
        "|---|---:|---:|",
    ]
    us_per_sample = 1e6 / rate / jobs
    lines += [
        f"| {part} | {n / total:.0%} | {n * us_per_sample:.1f} |"
        for part, n in counts.most_common()
    ]
    lines += ["", READING]
    return "\n".join(lines)


READING = """Reading it: the CPU µs are those of the sampled run, slowed by the sampling; the
shares are what carries over. The worker's own Python (running a job as an asyncio task with
its timeout and context, turning claim replies into running jobs, writing completions) is most
of it, and it is what bounds one process: `bench.where` shows Redis idle a third of the time.
The minimal loop (`bench/minimal_loop.py`) awaits each job's coroutine in turn, with no task,
timeout, context, retry, progress or log per job, which is the larger part of the gap to it."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_profile", description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=250, help="samples a second")
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    args = parser.parse_args(argv)
    if shutil.which("py-spy", path=str(Path(sys.executable).parent)) is None:
        sys.exit("py-spy is not installed beside this interpreter: pip install py-spy")
    with RedisServer() as server:
        _enqueue(server.url, "jobsite", args.jobs)
        raw = server.dir / "samples.txt"
        sample(server.url, args.rate, raw)
        counts = shares(raw)
    body = report(counts, args.jobs, args.rate)
    publish("worker-profile", body, docs=not args.no_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
