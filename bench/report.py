"""docs/benchmarks.md and the rich console table, from the results of bench.run."""

from __future__ import annotations

import os
import platform
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.peers import load
from bench.scenarios import TIMEOUT_ROUND_TRIPS, Result, Sizes

# key, title, short title (console), unit, higher is better
METRICS = (
    ("enqueue_one", "Enqueue one at a time", "enq 1", "jobs/s", True),
    ("enqueue_bulk", "Enqueue bulk", "enq bulk", "jobs/s", True),
    ("throughput_1", "Throughput 1 proc", "run 1p", "jobs/s", True),
    ("throughput_2", "Throughput 2 procs", "run 2p", "jobs/s", True),
    ("latency_p50_ms", "Latency p50", "p50", "ms", False),
    ("latency_p99_ms", "Latency p99", "p99", "ms", False),
    ("memory_mib_per_10k", "Redis mem / 10k jobs", "mem/10k", "MiB", False),
)
BASE = "jobsite"
# key, title: Redis reads (round trips) and commands per job, from bench.scenarios' counters.
ROUND_TRIPS = (
    ("rt_enqueue_one", "Round trips per enqueue (one at a time)"),
    ("rt_bulk", "Round trips per job, bulk enqueue"),
    ("rt_worker", "Round trips per job, worker (1 proc)"),
    ("commands_worker", "Commands per job, worker (1 proc)"),
)
# The section of docs/benchmarks.md that `bin/bench --rtt-ms R` writes.
RTT_SECTION = "redis-across-a-network"


@dataclass(frozen=True)
class Context:
    sizes: Sizes
    quick: bool
    redis_version: str
    versions: dict[str, dict[str, str]]
    argv: list[str]
    # With --rtt-ms: PING round trip p50 in ms ("direct", "proxied") and the proxy's CPU and
    # wall time in s ("proxy_cpu_s", "proxy_wall_s").
    pings: dict[str, float] = field(default_factory=dict)

    @property
    def rtt_ms(self) -> float | None:
        return self.sizes.rtt_ms if self.pings else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_total() -> str:
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return "unknown"
    return f"{pages / 2**30:.1f} GiB"


def fmt(value: Result | None, unit: str) -> str:
    if value is None:
        return "not run"
    if isinstance(value, str):
        return value if len(value) <= 48 else value[:45] + "..."
    return f"{value:,.0f}" if unit == "jobs/s" else f"{value:,.2f}"


# Below this many MiB per 10k jobs a system keeps (next to) nothing per job: no ratio then.
MEMORY_FLOOR_MIB = 0.1


def ratio(key: str, base: Result | None, peer: Result | None) -> float | None:
    if not isinstance(base, float) or not isinstance(peer, float):
        return None
    floor = MEMORY_FLOOR_MIB if key == "memory_mib_per_10k" else 1e-9
    if peer < floor or base < floor:
        return None
    return base / peer


def times(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.3g}x"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def results_rows(results: dict[str, dict[str, Result]]) -> list[list[str]]:
    return [
        [load(system).LABEL] + [fmt(out.get(key), unit) for key, _, _, unit, _ in METRICS]
        for system, out in results.items()
    ]


def ratio_rows(results: dict[str, dict[str, Result]]) -> list[list[str]]:
    base = results.get(BASE, {})
    rows = []
    for system, out in results.items():
        if system == BASE:
            continue
        cells = [ratio(key, base.get(key), out.get(key)) for key, *_ in METRICS]
        rows.append([load(system).LABEL] + [times(r) for r in cells])
    return rows


def round_trip_rows(results: dict[str, dict[str, Result]]) -> list[list[str]]:
    rows = []
    for system, out in results.items():
        cells = [out.get(key) for key, _ in ROUND_TRIPS]
        rows.append(
            [load(system).LABEL]
            + [f"{v:,.2f}" if isinstance(v, float) else fmt(v, "") for v in cells]
        )
    return rows


def round_trips(results: dict[str, dict[str, Result]]) -> str:
    header = ["System"] + [title for _, title in ROUND_TRIPS]
    intro = (
        "Counted by Redis: `INFO stats` `total_reads_processed` (one read per request or"
        " pipeline a client sent and then waited on, so one per round trip) and"
        " `total_commands_processed`, before and after each phase, divided by the jobs. The"
        " enqueue figure is over the enqueue-one-at-a-time scenario (its connection set-up"
        " included); bulk and worker are the two halves of the 1-process throughput scenario"
        " (the worker's start, idle polls and shutdown included)."
    )
    return intro + "\n\n" + markdown_table(header, round_trip_rows(results))


def network_note(ctx: Context) -> str:
    if ctx.rtt_ms is None:
        return ""
    return (
        f"\n**Redis across a network: {ctx.rtt_ms:g} ms round trip added.** Every system (its"
        " clients and workers) reaches the private redis-server through `bench/latency_proxy.py`,"
        f" which holds every chunk {ctx.rtt_ms / 2:g} ms each way, in order. Measured before the"
        f" run, PING round trip p50: {ctx.pings['direct']:.3f} ms direct,"
        f" {ctx.pings['proxied']:.3f} ms through the proxy. The proxy is a Python process on"
        " the same 2 cores (this kernel has no `tc netem`), so it also takes CPU from the"
        f" systems{proxy_usage(ctx.pings)}; `bin/bench --rtt-ms 0` shows that cost alone.\n"
    )


def proxy_usage(pings: dict[str, float]) -> str:
    cpu_s, wall_s = pings.get("proxy_cpu_s"), pings.get("proxy_wall_s")
    if cpu_s is None or not wall_s:
        return ""
    return (
        f" ({cpu_s:,.0f} s of CPU over the run's {wall_s:,.0f} s, {cpu_s / wall_s:.0%} of a core)"
    )


def demote(text: str) -> str:
    """Return markdown `text` with every heading one level deeper (for a section)."""
    return re.sub(r"^(#+) ", r"#\1 ", text, flags=re.M)


def method(ctx: Context) -> str:
    s = ctx.sizes
    memory_note = "" if s.memory == 10_000 else f" (measured on {s.memory:,} jobs, scaled)"
    return f"""- One private `redis-server {ctx.redis_version}` on a free loopback port, `--save ""
  --appendonly no`; `FLUSHALL` + `SCRIPT FLUSH` before every scenario. Systems run one after
  another, never concurrently. Each system's client and workers use its own venv.
- Every system runs the same no-op task, which calls `bench.probe.hit(t_enqueued)`: per worker
  process it counts task starts and keeps the first and last start time (written to a JSON file
  every 50 ms). Interpreter and worker start-up are therefore never counted.
- **Enqueue one at a time**: {s.one:,} sequential enqueues (each awaited), no worker running;
  the first enqueue (it opens the connection) is not timed.
- **Enqueue bulk**: {s.jobs:,} jobs through the system's bulk path (see the table below),
  no worker running; the best of the two bulk enqueues done for the throughput runs.
- **Throughput**: {s.jobs:,} jobs enqueued first, then 1 or 2 worker processes started;
  jobs/s = the task starts after the first 10 % / (last task start - the start that ended
  that 10 %), over all worker processes (each probe keeps every 100th start's time): the
  workers' first moments are left out for every system. A run that took under 3 s runs again
  with jobs enough for 3 s at its first rate (at most 1,000,000; the Notes name each), and
  that run gives the figure: a fresh Jobsite worker runs its first ~0.5 s at about half its
  later rate, which was most of a 20,000-job run (2026-12-01: 50,053 jobs/s over 200,000 jobs,
  29,566 over 20,000), while the slowest peers take minutes over 20,000.
- **Latency**: one idle worker, {s.samples} jobs enqueued one at a time {s.gap_ms:.0f} ms apart,
  each stamped with `time.time()` just before its enqueue; latency = task start - stamp.
- **Redis memory**: `INFO memory used_memory` after the jobs finished and the worker stopped,
  minus before, per 10,000 jobs{memory_note}, with each system's default result retention
  (1 MiB = 2^20 bytes); both read right after `CONFIG RESETSTAT`, which frees the latency
  histogram Redis 7 keeps for each command name it has run (about 26 KB each, scripts' commands
  included: a fixed cost of the server that grows with the kinds of command a system uses,
  not with its jobs; the commands first run in this step, such as Jobsite's settling below,
  would otherwise count). Jobsite's event
  stream is then as a project running the history mirror has it once the mirror caught up
  (`bench.client settle`: the mirror's group read and acknowledged every event, and the cleaner
  trimmed the stream by that); the job records stay, kept a day.
- **Minimal loop** is not a peer: it is the floor under Jobsite's worker
  (`bench/minimal_loop.py`: a Lua claim by priority with a lease, a token-fenced Lua completion,
  one event per job, one script call per batch of 100, nothing else). Its row in the relative
  table is Jobsite's share of that floor.
- Timeouts: a system that does not reach its count within max(60 s, jobs/150 s) (plus
  {TIMEOUT_ROUND_TRIPS} round trips per job across a network) is reported as `timeout` with the
  count it reached; it never hangs the run."""


def configs(results: dict[str, dict[str, Result]]) -> str:
    rows = [[load(s).LABEL, load(s).CONFIG, load(s).BULK] for s in results]
    return markdown_table(["System", "Worker configuration", "Bulk enqueue"], rows)


def versions(ctx: Context) -> str:
    rows = []
    for system, found in ctx.versions.items():
        packages = ", ".join(f"{k} {v}" for k, v in found.items() if k != "python")
        rows.append([load(system).LABEL, found.get("python", "?"), packages])
    return markdown_table(["System", "Python", "Packages"], rows)


def notes(results: dict[str, dict[str, Result]]) -> str:
    found = [f"- {load(s).LABEL}: {out['notes']}" for s, out in results.items() if out.get("notes")]
    if not found:
        return ""
    intro = (
        "Throughput runs made longer, and duplicate task starts and error lines found in the"
        " worker logs (`var/bench/<time>/`):"
    )
    return "\n## Notes\n\n" + intro + "\n\n" + "\n".join(found) + "\n"


def markdown(results: dict[str, dict[str, Result]], ctx: Context) -> str:
    header = ["System"] + [f"{title} ({unit})" for _, title, _, unit, _ in METRICS]
    warning = "\n> **Quick smoke run: small sizes, not representative.**\n" if ctx.quick else ""
    legend = (
        "Jobsite's value divided by the peer's. For jobs/s columns above 1 means Jobsite is faster;"
        " for latency and memory below 1 means Jobsite is lower (better). n/a: a figure is"
        f" missing, or (memory) one side keeps under {MEMORY_FLOOR_MIB} MiB per 10k jobs, i.e."
        " stores nothing per finished job by default, so a ratio would only measure noise."
    )
    title = "Benchmarks: Jobsite and its peers"
    if ctx.rtt_ms is not None:
        title = f"Redis across a network ({ctx.rtt_ms:g} ms round trip)"
    return f"""# {title}
{warning}
Generated {time.strftime("%Y-%m-%d %H:%M")} by `{" ".join(["bin/bench", *ctx.argv])}`.
{network_note(ctx)}
## Results

{markdown_table(header, results_rows(results))}

## Jobsite relative to each peer

{legend}

{markdown_table(["Peer"] + [title for _, title, *_ in METRICS], ratio_rows(results))}

## Round trips per job

{round_trips(results)}
{notes(results)}
## Method

{method(ctx)}

## Worker configurations and bulk enqueue

{configs(results)}

## Versions

{versions(ctx)}

## Machine

- CPU: {cpu_model()}, {os.cpu_count()} cores; memory {memory_total()}
- OS: {platform.platform()}
- Orchestrator Python {platform.python_version()}; Redis {ctx.redis_version}
- Workers, Redis and the enqueuing client share these cores.

## Rerun

```
bash bin/bench                       # full run, rewrites this file
bash bin/bench --quick               # smoke run, report under var/bench/<time>/
bash bin/bench --systems jobsite,rq --jobs 50000
bash bin/bench --rtt-ms 1            # Redis 1 ms away: the section "Redis across a network"
```

`bin/bench` makes `.venv` (Jobsite), `.venv-bench` (the peers, pinned in
`bench/requirements.txt`) and `.venv-bench-arq` (arq alone: arq 0.28.0 needs redis<6, the
project pins redis 8.1.0). Raw figures (`results.json`), worker logs and probe files are kept
under `var/bench/<time>/`.
"""


def print_rich(results: dict[str, dict[str, Result]], ctx: Context) -> None:
    console = Console()
    rtt = "" if ctx.rtt_ms is None else f", {ctx.rtt_ms:g} ms RTT"
    table = Table(title="Benchmark" + (" (quick smoke run)" if ctx.quick else "") + rtt)
    table.add_column("System")
    for _, _, short, unit, _ in METRICS:
        table.add_column(f"{short}\n{unit}", justify="right")
    for row in results_rows(results):
        table.add_row(*row)
    console.print(table)
    base = results.get(BASE, {})
    ratios = Table(title="Jobsite / peer (green: Jobsite better)")
    ratios.add_column("Peer")
    for _, _, short, _, _ in METRICS:
        ratios.add_column(short, justify="right")
    for system, out in results.items():
        if system == BASE:
            continue
        cells = []
        for key, *_, higher in METRICS:
            r = ratio(key, base.get(key), out.get(key))
            color = "green" if r and (r > 1) == higher else "red"
            cells.append(f"[{color}]{times(r)}[/]" if r else "n/a")
        ratios.add_row(load(system).LABEL, *cells)
    if BASE in results and len(results) > 1:
        console.print(ratios)
    trips = Table(title="Round trips (Redis reads) and commands per job")
    trips.add_column("System")
    for _, title in ROUND_TRIPS:
        trips.add_column(title, justify="right")
    for row in round_trip_rows(results):
        trips.add_row(*row)
    console.print(trips)


SECTION = re.compile(r"<!-- section:(?P<name>[a-z-]+) -->.*?<!-- /section:(?P=name) -->", re.S)


def with_sections(new: str, old: str) -> str:
    """Return `new` with the marked sections of `old` (written by other benchmarks) appended."""
    kept = [m.group(0) for m in SECTION.finditer(old) if m.group(0) not in new]
    return new.rstrip() + ("\n\n" + "\n\n".join(kept) + "\n" if kept else "\n")


def put_section(path: Path, name: str, body: str) -> None:
    """Write `body` as section `name` of the report at `path`, replacing an older one."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"<!-- section:{name} -->\n{body.strip()}\n<!-- /section:{name} -->"
    pattern = re.compile(rf"<!-- section:{name} -->.*?<!-- /section:{name} -->", re.S)
    text = (
        pattern.sub(lambda _: block, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + block + "\n"
    )
    path.write_text(text)


def publish(name: str, body: str, docs: bool = True) -> None:
    """Print a benchmark's section; unless `docs` is off, write it into docs/benchmarks.md."""
    print(body)
    if docs:
        put_section(Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md", name, body)
