"""How one busy queue's work spreads over the masters of a Redis Cluster.

    bin/bench-cluster [--quick] [--masters 3,6] [--jobs N] [--workers W] [--no-docs]

Every key of a queue carries the queue name as its hash tag (engine/keys.py), so one queue
lives on one slot, one master, one Redis core. For each cluster size (a private cluster of M
masters, no replicas, on loopback; engine/dev/devcluster.py) two scenarios, each on emptied
masters: N jobs enqueued in bulk into one queue `hot`, then the same N jobs spread evenly over
2 x M queues `hot<i>` (names picked by their slot so that every master holds two); W burst
worker processes following the scenario's queues then run them all. Per scenario: jobs/s from
the probe, and per master the commands and the Redis main thread's CPU time from INFO
(before the workers start, after they exit), with the model these imply: the busiest master's
Redis µs per job and the jobs/s that would fill its one core. Writes the section "cluster" of
docs/benchmarks.md (`--no-docs`: print only).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from bench import procs
from bench.collect import read_probe
from bench.peers import chunks
from bench.report import markdown_table, publish
from engine.dev.devcluster import ClusterServer
from engine.keys import QueueKeys

ROOT = Path(__file__).resolve().parent.parent
SECTION = "cluster"
PREFIX = "jobsite"
BATCH = 1000
CONCURRENCY = 200
# Queues of the spread scenario on each master.
QUEUES_PER_MASTER = 2
# (masters, jobs, workers) of a quick and of a full run.
QUICK = ((3,), 5_000, 1)
FULL = ((3, 6), 50_000, 2)


@dataclass(frozen=True)
class MasterUse:
    """What one master did over a scenario's worker run."""

    port: int
    queues: int
    jobs: int
    cpu_us: float
    commands: int


@dataclass(frozen=True)
class Outcome:
    """One scenario's figures: its jobs, the probe's count and rate, each master's use."""

    masters: int
    queues: tuple[str, ...]
    jobs: int
    workers: int
    ran: int
    span_s: float
    per_master: tuple[MasterUse, ...]

    @property
    def scenario(self) -> str:
        return "one queue" if len(self.queues) == 1 else f"{len(self.queues)} queues"

    @property
    def jobs_s(self) -> float:
        return self.ran / self.span_s if self.span_s > 0 else 0.0

    @property
    def busiest(self) -> MasterUse:
        return max(self.per_master, key=lambda m: m.cpu_us)

    @property
    def evenness(self) -> float:
        """Return the busiest master's CPU over the mean of all masters' (1 is even)."""
        mean_us = sum(m.cpu_us for m in self.per_master) / len(self.per_master)
        return self.busiest.cpu_us / mean_us if mean_us > 0 else 0.0

    @property
    def busiest_us_per_job(self) -> float:
        """Return the busiest master's Redis µs per job of the queues it holds."""
        top = self.busiest
        return top.cpu_us / top.jobs if top.jobs else float("nan")

    @property
    def ceiling_jobs_s(self) -> float:
        """Return the jobs/s that would fill the busiest master's core: all the jobs over its
        CPU time (one queue: 1e6 / its µs per job; an even spread: that x masters)."""
        top = self.busiest.cpu_us
        return self.jobs * 1e6 / top if top > 0 else 0.0

    @property
    def busiest_busy(self) -> float:
        """Return the busiest master's CPU time over the probe's span (first to last start)."""
        return self.busiest.cpu_us / (self.span_s * 1e6) if self.span_s > 0 else 0.0


def pick_queues(owner: Callable[[str], int], masters: int, per_master: int) -> list[str]:
    """Return queue names `hot0`, `hot1`, ... in order, each kept while its master (`owner`)
    holds fewer than `per_master`, until every one of `masters` holds `per_master`."""
    held: dict[int, int] = {}
    names: list[str] = []
    for i in range(100_000):
        name = f"hot{i}"
        port = owner(name)
        if held.get(port, 0) < per_master:
            held[port] = held.get(port, 0) + 1
            names.append(name)
            if len(names) == masters * per_master:
                return names
    raise RuntimeError(f"no {per_master} queues for each of {masters} masters among hot0..")


def split_jobs(jobs: int, queues: Sequence[str]) -> dict[str, int]:
    """Return each queue's share of `jobs`, as even as whole jobs allow."""
    base, extra = divmod(jobs, len(queues))
    return {q: base + (1 if i < extra else 0) for i, q in enumerate(queues)}


class Cluster:
    """A running ClusterServer with its masters' ports in slot order and a key's master."""

    def __init__(self, server: ClusterServer) -> None:
        self.server = server
        self.first = redis.Redis(port=server.ports[0], decode_responses=True)
        starts: dict[int, int] = {}
        self.ranges: list[tuple[int, int, int]] = []
        for start, end, master, *_ in self.first.cluster("slots"):
            port = int(master[1])
            self.ranges.append((int(start), int(end), port))
            starts[port] = min(starts.get(port, start), start)
        self.masters = sorted(starts, key=starts.__getitem__)

    def owner(self, queue: str) -> int:
        """Return the port of the master serving `queue`'s keys (CLUSTER KEYSLOT of a key)."""
        slot = int(self.first.cluster("keyslot", QueueKeys(PREFIX, queue).marker))
        return next(port for start, end, port in self.ranges if start <= slot <= end)

    def usage(self) -> dict[int, tuple[float, int]]:
        """Return each master's main-thread CPU µs and commands processed so far."""
        out: dict[int, tuple[float, int]] = {}
        for port in self.masters:
            with redis.Redis(port=port) as r:
                info = r.info("cpu", "stats")
            cpu_s = info["used_cpu_user_main_thread"] + info["used_cpu_sys_main_thread"]
            out[port] = (float(cpu_s) * 1e6, int(info["total_commands_processed"]))
        return out

    def reset(self) -> None:
        """Empty every master and drop its scripts."""
        for port in self.masters:
            with redis.Redis(port=port) as r:
                r.flushall()
                r.script_flush()

    def version(self) -> str:
        return str(self.first.info("server")["redis_version"])

    def close(self) -> None:
        self.first.close()


async def _enqueue(url: str, counts: dict[str, int]) -> None:
    """Enqueue each queue's count of no-op jobs, BATCH a call."""
    from bench.peers.jobsite_tasks import noop
    from engine import Client, EngineSettings

    client = Client(EngineSettings.from_url(url, prefix=PREFIX))
    try:
        for queue, n in counts.items():
            task = noop.using(queue=queue)
            for size in chunks(n, BATCH):
                await client.enqueue_many([task.call(0.0) for _ in range(size)])
    finally:
        await client.aclose()


def worker_argv(url: str, queues: Sequence[str]) -> list[str]:
    """Return the argv of one burst worker following `queues`."""
    argv = [sys.executable, "-m", "engine", "worker", "--url", url, "--burst"]
    argv += ["--prefix", PREFIX, "--tasks", "bench.peers.jobsite_tasks"]
    argv += ["--queues", ",".join(queues)]
    return [*argv, "--concurrency", str(CONCURRENCY), "--log-level", "ERROR"]


def _run_workers(url: str, queues: Sequence[str], workers: int, run_dir: Path, jobs: int) -> None:
    """Run `workers` burst workers until they exit; raise unless all drained and exited 0."""
    probe_dir = run_dir / "probe"
    env = {**os.environ, "BENCH_PROBE_DIR": str(probe_dir), "PYTHONWARNINGS": "ignore"}
    started = [
        procs.start_group(worker_argv(url, queues), env, ROOT, run_dir / f"worker-{i}.log")
        for i in range(workers)
    ]
    try:
        drained = procs.wait_exit(started, timeout_s=max(60.0, jobs / 200))
    finally:
        procs.stop_groups(started)
    failed = [p.returncode for p in started if p.returncode != 0]
    if not drained or failed:
        tail = (run_dir / "worker-0.log").read_text(errors="replace")[-2000:]
        why = f"exited with {failed}" if drained else f"did not drain {jobs:,} jobs"
        raise RuntimeError(f"the workers {why}; the first one's log ends:\n{tail}")


def run_scenario(
    cluster: Cluster, queues: Sequence[str], jobs: int, workers: int, say: Callable[[str], None]
) -> Outcome:
    """Enqueue `jobs` over `queues` on emptied masters, run `workers` burst workers, measure."""
    cluster.reset()
    counts = split_jobs(jobs, queues)
    started = time.perf_counter()
    asyncio.run(_enqueue(cluster.server.url, counts))
    enqueue_s = time.perf_counter() - started
    label = queues[0] if len(queues) == 1 else f"{len(queues)} queues"
    say(f"enqueued {jobs:,} jobs into {label} in {enqueue_s:.1f} s ({jobs / enqueue_s:,.0f}/s)")
    before = cluster.usage()
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as folder:
        run_dir = Path(folder)
        (run_dir / "probe").mkdir()
        _run_workers(cluster.server.url, queues, workers, run_dir, jobs)
        totals = read_probe(run_dir / "probe")
    after = cluster.usage()
    if totals.count != jobs:
        raise RuntimeError(f"{totals.count:,} of {jobs:,} jobs ran")
    on: dict[int, list[str]] = {port: [] for port in cluster.masters}
    for queue in queues:
        on[cluster.owner(queue)].append(queue)
    per_master = tuple(
        MasterUse(
            port=port,
            queues=len(on[port]),
            jobs=sum(counts[q] for q in on[port]),
            cpu_us=after[port][0] - before[port][0],
            commands=after[port][1] - before[port][1],
        )
        for port in cluster.masters
    )
    outcome = Outcome(
        len(cluster.masters), tuple(queues), jobs, workers, totals.count, totals.span_s, per_master
    )
    say(
        f"workers done: {outcome.ran:,} jobs at {outcome.jobs_s:,.0f} jobs/s; busiest master "
        f"{outcome.busiest_us_per_job:.1f} Redis µs a job"
    )
    return outcome


def run_cluster(
    masters: int, jobs: int, workers: int, say: Callable[[str], None]
) -> tuple[list[Outcome], str, dict[int, list[str]]]:
    """Start an M-master cluster and run both scenarios on it; return their outcomes, the Redis
    version and the spread's queues by master (in slot order)."""
    started = time.perf_counter()
    with ClusterServer(masters=masters) as server:
        cluster = Cluster(server)
        try:
            say(
                f"started a cluster of {masters} masters ({', '.join(map(str, cluster.masters))})"
                f" in {time.perf_counter() - started:.1f} s"
            )
            spread = pick_queues(cluster.owner, masters, QUEUES_PER_MASTER)
            by_master: dict[int, list[str]] = {port: [] for port in cluster.masters}
            for queue in spread:
                by_master[cluster.owner(queue)].append(queue)
            say("spread: " + "; ".join(f"{p}: {', '.join(q)}" for p, q in by_master.items()))
            outcomes = [
                run_scenario(cluster, ["hot"], jobs, workers, say),
                run_scenario(cluster, spread, jobs, workers, say),
            ]
            return outcomes, cluster.version(), by_master
        finally:
            cluster.close()


def _per_master(values: Sequence[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in values)


HEADER = [
    "masters",
    "scenario",
    "queues per master",
    "jobs",
    "ran",
    "workers",
    "jobs/s",
    "Redis CPU ms per master",
    "commands per master (k)",
    "max/mean CPU",
    "busiest master busy",
    "busiest master µs/job",
    "model ceiling jobs/s",
]


def row(o: Outcome) -> list[str]:
    """Return one scenario's cells of the table (per-master figures in slot order)."""
    return [
        str(o.masters),
        o.scenario,
        _per_master([m.queues for m in o.per_master], "d"),
        f"{o.jobs:,}",
        f"{o.ran:,}",
        str(o.workers),
        f"{o.jobs_s:,.0f}",
        _per_master([m.cpu_us / 1000 for m in o.per_master], ",.0f"),
        _per_master([m.commands / 1000 for m in o.per_master], ",.1f"),
        f"{o.evenness:.2f}",
        f"{o.busiest_busy:.0%}",
        f"{o.busiest_us_per_job:.1f}",
        f"{o.ceiling_jobs_s:,.0f}",
    ]


def table(outcomes: Sequence[Outcome]) -> str:
    return markdown_table(HEADER, [row(o) for o in outcomes])


def reading(outcomes: Sequence[Outcome]) -> str:
    """Return what the figures say, in sentences built from them alone."""
    sentences = []
    for single, spread in zip(outcomes[::2], outcomes[1::2], strict=True):
        total_us = sum(m.cpu_us for m in single.per_master)
        share = single.busiest.cpu_us / total_us if total_us else 0.0
        gain = spread.ceiling_jobs_s / single.ceiling_jobs_s if single.ceiling_jobs_s else 0.0
        sentences.append(
            f"With {single.masters} masters, one queue put {share:.0%} of the cluster's Redis "
            f"CPU on one master (max/mean {single.evenness:.2f}, {single.masters} at most); "
            f"over {len(spread.queues)} queues max/mean was {spread.evenness:.2f}. The busiest "
            f"master spent {single.busiest_us_per_job:.1f} µs a job with one queue and "
            f"{spread.busiest_us_per_job:.1f} µs a job of its queues with the spread: a model "
            f"ceiling of {single.ceiling_jobs_s:,.0f} jobs/s for one queue and "
            f"{spread.ceiling_jobs_s:,.0f} for the spread ({gain:.1f}x). Measured: "
            f"{single.jobs_s:,.0f} and {spread.jobs_s:,.0f} jobs/s, the busiest master busy "
            f"{single.busiest_busy:.0%} and {spread.busiest_busy:.0%} of the run."
        )
    busy = max(o.busiest_busy for o in outcomes)
    bound = (
        "no master was near a full core, so the measured rates are the workers' (Python on "
        "the same cores), not Redis's"
        if busy < 0.8
        else "a master was near a full core"
    )
    sentences.append(
        f"This machine has {os.cpu_count()} cores, shared by the worker processes and every "
        f"master: {bound}; it cannot show the ceilings themselves, which assume a core per "
        "master and workers enough to keep each one busy."
    )
    return " ".join(sentences)


METHOD = """- A private Redis Cluster per size (`engine/dev/devcluster.py`: M cluster-enabled
  `redis-server`s on loopback joined by `redis-cli --cluster create`, no replicas, no
  persistence). Before each scenario every master is emptied (`FLUSHALL`, `SCRIPT FLUSH`).
- **one queue**: the N jobs (`bench.noop`, no-op) enqueued into queue `hot` with
  `Client.enqueue_many`, batches of 1,000; all its keys share the hash tag `{hot}`, so one slot
  on one master. **2 x M queues**: the same N jobs split evenly over queues `hot<i>`, picked in
  order of i, each kept while its master (`CLUSTER KEYSLOT` of its keys) holds fewer than two:
  two queues on every master (the queues by master are listed under the table).
- Then W burst worker processes (`python -m engine worker --burst --concurrency 200`) follow
  the scenario's queues until they are empty. jobs/s = the jobs the probe counted / its span
  (first task start to last, over all workers).
- Per master, read with `INFO` right before the workers start and after they exit: Redis CPU
  (`used_cpu_user_main_thread + used_cpu_sys_main_thread`: the scripts, their commands, the
  I/O; the workers' start-up and shutdown included) and `total_commands_processed`, in slot
  order; a master no queue lives on still spends some CPU on its cron and the cluster bus.
  max/mean CPU: the busiest master's CPU over the masters' mean (1 is even, M is all on one).
  Busiest master busy: its CPU over the probe's span.
- The model: µs per job = the busiest master's CPU / the jobs of the queues it holds; model
  ceiling = the jobs / that master's CPU seconds, the rate that fills its one core (one queue:
  1e6 / its µs per job; an even spread: that x M)."""


def markdown(outcomes: Sequence[Outcome], version: str, spreads: dict[int, str], cmd: str) -> str:
    """Return the section: how it was run, the table, the spread's queues, the reading."""
    lines = [
        "## One busy queue on a Redis Cluster",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M')} by `{cmd}`; redis-server {version}, "
        f"{os.cpu_count()} cores shared by the workers and every master. Partitioned queues "
        "(one queue over several slots) are not built yet: this measures the two ends that "
        "bound them, one queue (one slot, one master) and the same work spread over queues on "
        "every master.",
        "",
        METHOD,
        "",
        table(outcomes),
        "",
        *(f"Queues by master, {m} masters: {text}." for m, text in spreads.items()),
        "",
        "Reading: " + reading(outcomes),
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bin/bench-cluster", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 masters, 5,000 jobs, 1 worker")
    parser.add_argument("--masters", help="cluster sizes, comma-separated (default 3,6)")
    parser.add_argument("--jobs", type=int, help="jobs per scenario (default 50,000)")
    parser.add_argument("--workers", type=int, help="worker processes (default 2)")
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    args = parser.parse_args(argv)
    sizes, jobs, workers = QUICK if args.quick else FULL
    args.masters = [int(m) for m in args.masters.split(",")] if args.masters else list(sizes)
    args.jobs = args.jobs or jobs
    args.workers = args.workers or workers
    if min(args.masters) < 3:
        parser.error("a Redis Cluster needs at least 3 masters")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("redis-cli") is None:
        raise SystemExit("redis-cli not found: install Redis 7 (apt-get install redis-tools)")

    def say(line: str) -> None:
        print(line, flush=True)

    outcomes: list[Outcome] = []
    spreads: dict[int, str] = {}
    version = "?"
    for masters in args.masters:
        found, version, by_master = run_cluster(masters, args.jobs, args.workers, say)
        outcomes += found
        spreads[masters] = " | ".join(", ".join(q) for q in by_master.values())
    cmd = " ".join(["bin/bench-cluster", *(sys.argv[1:] if argv is None else argv)])
    publish(SECTION, markdown(outcomes, version, spreads, cmd), docs=not args.no_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
