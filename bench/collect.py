"""Read the probe files written by bench.probe and wait for an expected job count."""

from __future__ import annotations

import json
import math
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.probe import MARK_EVERY

POLL_S = 0.05


class BenchError(Exception):
    """A scenario could not produce a figure; the message goes into the report."""


# The share of a throughput run's starts left out of its steady rate: the workers' first moments
# (connections, buffers and caches warming), the same for every system.
WARM_SHARE = 0.1


@dataclass
class ProbeTotals:
    count: int = 0
    first: float = 0.0
    last: float = 0.0
    processes: int = 0
    latencies: list[float] = field(default_factory=list)
    # The time of every MARK_EVERY-th start of each process (bench.probe), merged and sorted.
    marks: list[float] = field(default_factory=list)

    @property
    def span_s(self) -> float:
        return self.last - self.first

    def steady_rate(self) -> float:
        """Return starts per second from the first mark past WARM_SHARE of them to the last start.

        Each mark stands for MARK_EVERY starts of one process. With too few marks to leave a
        share out (a short run), the whole span's rate.
        """
        warm = math.ceil(len(self.marks) * WARM_SHARE)
        if len(self.marks) < 20 or self.last <= self.marks[warm]:
            return self.count / self.span_s if self.span_s > 0 else 0.0
        return (self.count - (warm + 1) * MARK_EVERY) / (self.last - self.marks[warm])


def read_probe(folder: Path) -> ProbeTotals:
    totals = ProbeTotals()
    firsts: list[float] = []
    lasts: list[float] = []
    for path in folder.glob("*.json"):
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue
        if not data.get("count"):
            continue
        totals.count += int(data["count"])
        totals.processes += 1
        firsts.append(float(data["first"]))
        lasts.append(float(data["last"]))
        totals.marks.extend(float(x) for x in data.get("marks", ()))
        totals.latencies.extend(float(x) for x in data.get("latencies", ()))
    if firsts:
        totals.first, totals.last = min(firsts), max(lasts)
    totals.marks.sort()
    return totals


def wait_for_count(
    folder: Path, expected: int, timeout_s: float, procs: list[subprocess.Popen[bytes]]
) -> ProbeTotals:
    """Poll the probe files until `expected` task starts are counted; BenchError otherwise."""
    deadline = time.monotonic() + timeout_s
    exited_at: float | None = None
    while True:
        totals = read_probe(folder)
        if totals.count >= expected:
            return totals
        now = time.monotonic()
        if exited_at is None and all(proc.poll() is not None for proc in procs):
            exited_at = now
        if exited_at is not None and now - exited_at > 1.0:
            codes = ",".join(str(proc.returncode) for proc in procs)
            raise BenchError(f"workers exited (rc={codes}) at {totals.count}/{expected}")
        if now > deadline:
            raise BenchError(f"timeout after {timeout_s:.0f}s at {totals.count}/{expected}")
        time.sleep(POLL_S)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]
