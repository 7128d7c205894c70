"""The five measurements for one system, each on a freshly flushed Redis.

1. enqueue_one: N sequential enqueues, no worker running.
2. throughput_1 / throughput_2: N jobs bulk-enqueued first (that enqueue gives enqueue_bulk),
   then 1 or 2 worker processes started; jobs/s = the starts after the first 10 % / (last start
   - the start that ended that 10 %) across the probe files (ProbeTotals.steady_rate), so
   interpreter start-up and the workers' first moments are not counted. A run shorter than
   MIN_SPAN_S is run again with jobs enough for it, and that run gives the figure.
3. latency: one idle worker, a few warm-up jobs, then samples enqueued one at a time ~10 ms apart
   stamped with time.time(); p50 / p99 of (task start - stamp).
4. memory: used_memory after M jobs finished, the worker stopped and the system's own
   housekeeping settled (bench.client settle), minus before, scaled to 10k; both read after
   CONFIG RESETSTAT, so Redis's per-command latency histograms are not counted.

Round trips: Redis counts the reads it processes (`INFO stats total_reads_processed`: one per
chunk a client sent and Redis read, so one per request or pipeline that waits for its reply). The
difference across enqueue_one gives round trips per enqueue; across throughput_1 it gives them
per job for the bulk enqueue and, separately, for the worker's run (with its commands per job).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import redis

from bench import procs
from bench.collect import BenchError, ProbeTotals, percentile, read_probe, wait_for_count
from bench.peers import load

WARMUP = 3
Result = float | str


@dataclass(frozen=True)
class Sizes:
    jobs: int
    one: int
    samples: int
    memory: int
    gap_ms: float = 10.0
    # The round trip added between every system and Redis (bin/bench --rtt-ms); 0 on loopback.
    rtt_ms: float = 0.0


# Round trips per job allowed for in a timeout across a network (RQ's worker makes about 18).
TIMEOUT_ROUND_TRIPS = 40


def timeout_for(n: int, rtt_ms: float = 0.0) -> float:
    return max(60.0, n / 150) + n * TIMEOUT_ROUND_TRIPS * rtt_ms / 1000


@dataclass(frozen=True)
class Counters:
    """Redis' cumulative counts of client reads (round trips) and commands."""

    reads: int
    commands: int

    def per_job(self, before: Counters, n: int) -> tuple[float, float]:
        return (self.reads - before.reads) / n, (self.commands - before.commands) / n


@dataclass
class SystemBench:
    root: Path
    system: str
    python: Path
    url: str
    run_dir: Path
    sizes: Sizes
    redis: redis.Redis
    notes: list[str] = field(default_factory=list)

    @property
    def peer(self) -> ModuleType:
        return load(self.system)

    def env(self, probe_dir: Path | None = None) -> dict[str, str]:
        env = dict(os.environ)
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = f"{self.root}{os.pathsep}{path}" if path else str(self.root)
        env["BENCH_REDIS_URL"] = self.url
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("BENCH_PROBE_DIR", None)
        if probe_dir is not None:
            env["BENCH_PROBE_DIR"] = str(probe_dir)
        return env

    def timeout(self, n: int) -> float:
        return timeout_for(n, self.sizes.rtt_ms)

    def counters(self) -> Counters:
        stats = self.redis.info("stats")
        return Counters(int(stats["total_reads_processed"]), int(stats["total_commands_processed"]))

    def client(self, mode: str, n: int = 0) -> dict[str, float]:
        argv = [str(self.python), "-m", "bench.client", self.system, mode, str(n)]
        argv += ["--gap-ms", str(self.sizes.gap_ms)]
        timeout = self.timeout(n) + (n * self.sizes.gap_ms / 1000 if mode == "spaced" else 0)
        try:
            done = subprocess.run(
                argv, env=self.env(), cwd=self.root, capture_output=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise BenchError(f"client {mode} timeout after {timeout:.0f}s") from None
        lines = done.stdout.decode(errors="replace").strip().splitlines()
        if done.returncode != 0 or not lines:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise BenchError(f"client {mode} failed: {tail[0][:200]}")
        return json.loads(lines[-1])

    def flush(self) -> None:
        self.redis.flushall()
        self.redis.script_flush()

    def fresh(self, scenario: str) -> Path:
        """Flush Redis and return a new, empty probe folder for the scenario."""
        self.flush()
        folder = self.run_dir / f"probe-{self.system}-{scenario}"
        folder.mkdir(parents=True)
        return folder

    def log_path(self, scenario: str, index: int) -> Path:
        return self.run_dir / f"{self.system}-{scenario}-{index}.log"

    def workers(self, scenario: str, count: int, burst: bool, probe_dir: Path) -> list:
        bindir = self.python.parent
        started = []
        for index in range(count):
            argv = self.peer.worker_argv(bindir, self.url, burst, index)
            log = self.log_path(scenario, index)
            started.append(procs.start_group(argv, self.env(probe_dir), self.root, log))
        return started

    def check(self, scenario: str, count: int, expected: int, processes: int) -> None:
        """Note duplicate task starts and errors the workers logged."""
        if count > expected:
            self.notes.append(f"{scenario}: {count - expected} task starts more than jobs")
        for index in range(processes):
            path = self.log_path(scenario, index)
            text = path.read_text(errors="replace") if path.exists() else ""
            errors = sum(1 for line in text.splitlines() if "Traceback" in line or "ERROR" in line)
            if errors:
                self.notes.append(f"{scenario}: {errors} error lines in {path.name}")

    def used_memory(self) -> int:
        """Return `used_memory` without Redis's latency histograms: Redis 7 keeps one (about
        26 KB) for each command name a server has run, scripts' commands included, until
        CONFIG RESETSTAT. That is a fixed cost of the server, not of any job."""
        self.redis.config_resetstat()
        return int(self.redis.info("memory")["used_memory"])


def enqueue_one(bench: SystemBench, out: dict[str, Result]) -> None:
    bench.flush()
    before = bench.counters()
    done = bench.client("one", bench.sizes.one)
    out["enqueue_one"] = done["n"] / done["elapsed_s"]
    out["rt_enqueue_one"] = bench.counters().per_job(before, bench.sizes.one)[0]


# A throughput run shorter than this is run again with jobs enough for it at the first run's
# rate (at most MAX_JOBS): a fast system's 20,000 jobs took 0.6 s, mostly its workers' first
# moments, where the slowest peers take minutes.
MIN_SPAN_S = 3.0
MAX_JOBS = 1_000_000


def _throughput(bench: SystemBench, out: dict[str, Result], processes: int) -> None:
    n = bench.sizes.jobs
    final = _throughput_run(bench, out, processes, n, f"throughput{processes}")
    if 0 < final.span_s < MIN_SPAN_S and n < MAX_JOBS:
        more = min(MAX_JOBS, math.ceil(n * MIN_SPAN_S / final.span_s))
        bench.notes.append(
            f"throughput{processes}: {n:,} jobs took {final.span_s:.2f} s; the figure is of a"
            f" second run of {more:,} jobs"
        )
        final = _throughput_run(bench, {}, processes, more, f"throughput{processes}-long")
    if final.span_s <= 0:
        raise BenchError("no measurable span")
    out[f"throughput_{processes}"] = final.steady_rate()


def _throughput_run(
    bench: SystemBench, out: dict[str, Result], processes: int, n: int, scenario: str
) -> ProbeTotals:
    """Enqueue `n` jobs in bulk, drain them with `processes` workers; return the probe totals
    (and fill `out` with the bulk rate and, for one process, the round trips per job)."""
    probe_dir = bench.fresh(scenario)
    before = bench.counters()
    done = bench.client("bulk", n)
    out[f"bulk_{processes}"] = n / done["elapsed_s"]
    enqueued = bench.counters()
    started = bench.workers(scenario, processes, bench.peer.BURST, probe_dir)
    try:
        wait_for_count(probe_dir, n, bench.timeout(n), started)
        if bench.peer.BURST:  # let it exit by itself rather than be signalled mid-teardown
            procs.wait_exit(started, 3.0)
    finally:
        procs.stop_groups(started)
    if processes == 1:
        out["rt_bulk"] = enqueued.per_job(before, n)[0]
        out["rt_worker"], out["commands_worker"] = bench.counters().per_job(enqueued, n)
    final = read_probe(probe_dir)
    bench.check(scenario, final.count, n, processes)
    return final


def throughput_1(bench: SystemBench, out: dict[str, Result]) -> None:
    _throughput(bench, out, 1)


def throughput_2(bench: SystemBench, out: dict[str, Result]) -> None:
    _throughput(bench, out, 2)


def latency(bench: SystemBench, out: dict[str, Result]) -> None:
    samples = bench.sizes.samples
    probe_dir = bench.fresh("latency")
    started = bench.workers("latency", 1, False, probe_dir)
    try:
        bench.client("bulk", WARMUP)
        wait_for_count(probe_dir, WARMUP, bench.timeout(WARMUP), started)
        bench.client("spaced", samples)
        totals = wait_for_count(probe_dir, WARMUP + samples, bench.timeout(samples), started)
    finally:
        procs.stop_groups(started)
    bench.check("latency", read_probe(probe_dir).count, WARMUP + samples, 1)
    values = [x * 1000 for x in totals.latencies]
    if not values:
        raise BenchError("no latency samples")
    out["latency_p50_ms"] = percentile(values, 50)
    out["latency_p99_ms"] = percentile(values, 99)


def memory(bench: SystemBench, out: dict[str, Result]) -> None:
    n = bench.sizes.memory
    probe_dir = bench.fresh("memory")
    before = bench.used_memory()
    bench.client("bulk", n)
    burst = bench.peer.BURST
    started = bench.workers("memory", 1, burst, probe_dir)
    try:
        wait_for_count(probe_dir, n, bench.timeout(n), started)
        # Let the last job's completion be written: a burst worker exits by itself.
        if not (burst and procs.wait_exit(started, 10.0)):
            time.sleep(1.0)
    finally:
        procs.stop_groups(started)
    time.sleep(0.2)
    bench.client("settle")
    bench.check("memory", read_probe(probe_dir).count, n, 1)
    out["memory_mib_per_10k"] = (bench.used_memory() - before) / 2**20 * 10_000 / n


# Each step with the result keys it fills; a failed step fills its unfilled keys with the error.
STEPS: tuple[tuple[Callable[[SystemBench, dict[str, Result]], None], tuple[str, ...]], ...] = (
    (enqueue_one, ("enqueue_one", "rt_enqueue_one")),
    (throughput_1, ("bulk_1", "throughput_1", "rt_bulk", "rt_worker", "commands_worker")),
    (throughput_2, ("bulk_2", "throughput_2")),
    (latency, ("latency_p50_ms", "latency_p99_ms")),
    (memory, ("memory_mib_per_10k",)),
)


def best_bulk(out: dict[str, Result]) -> Result:
    rates = [v for k in ("bulk_1", "bulk_2") if isinstance(v := out.get(k), float)]
    return max(rates) if rates else out.get("bulk_1", "not run")
