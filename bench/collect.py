"""Read the probe files written by bench.probe and wait for an expected job count."""

from __future__ import annotations

import json
import math
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

POLL_S = 0.05


class BenchError(Exception):
    """A scenario could not produce a figure; the message goes into the report."""


@dataclass
class ProbeTotals:
    count: int = 0
    first: float = 0.0
    last: float = 0.0
    processes: int = 0
    latencies: list[float] = field(default_factory=list)

    @property
    def span_s(self) -> float:
        return self.last - self.first


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
        totals.latencies.extend(float(x) for x in data.get("latencies", ()))
    if firsts:
        totals.first, totals.last = min(firsts), max(lasts)
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
