"""The charts' data: throughput, wait and run time percentiles and queue depth over a range.

Each range reads the rollup span of its step (RANGES): the hour at 1-minute points, the day at
15-minute points, the week at hourly points, so a query reads one row per point and series.
Queue depth comes from the samples `sample_depth` takes once a minute (runworker's depth loop).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet, Sum
from django.utils import timezone

from jobsite.jobs import services
from jobsite.jobs.history.rollup import RETRIED, RUN, TOTAL, WAIT, merge, percentile
from jobsite.jobs.models import QueueDepth, RollupCount


@dataclass(frozen=True)
class Range:
    """A chart range: how far back it looks and the width of one point."""

    span_s: int
    step_s: int

    @property
    def points(self) -> int:
        """Return the number of points the range shows."""
        return self.span_s // self.step_s


RANGES = {"hour": Range(3600, 60), "day": Range(86_400, 900), "week": Range(604_800, 3600)}
COUNTS = ("completed", "failed", RETRIED)
QUANTILES = {"p50": 0.5, "p95": 0.95}
DEPTHS = ("waiting", "scheduled", "running")


def slots(chosen: Range, now: datetime) -> list[datetime]:
    """Return the start of every point of the range, oldest first; the last holds `now`."""
    seconds = int(now.timestamp())
    last = seconds - seconds % chosen.step_s
    first = last - (chosen.points - 1) * chosen.step_s
    return [
        datetime.fromtimestamp(first + i * chosen.step_s, tz=now.tzinfo)
        for i in range(chosen.points)
    ]


def _percentiles(hists: dict[int, int]) -> dict[str, float | None]:
    return {
        name: None if (v := percentile(hists, q)) is None else round(v, 1)
        for name, q in QUANTILES.items()
    }


def _durations(rows: Sequence[Mapping[str, Any]], index: dict[datetime, int]) -> dict[str, Any]:
    """Return per point and overall p50 and p95 (ms) of the wait and run histograms."""
    by_point: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    overall: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        if r["series"] in (WAIT, RUN) and r["start"] in index:
            pair = (r["bucket"], r["n"])
            by_point[(r["series"], index[r["start"]])].append(pair)
            overall[r["series"]].append(pair)
    out: dict[str, Any] = {}
    for series in (WAIT, RUN):
        points = [_percentiles(merge(by_point.get((series, i), []))) for i in range(len(index))]
        whole = merge(overall.get(series, []))
        out[series] = {
            **{name: [p[name] for p in points] for name in QUANTILES},
            "count": sum(whole.values()),
            "overall": _percentiles(whole),
        }
    return out


def _throughput(
    rows: Sequence[Mapping[str, Any]], index: dict[datetime, int]
) -> dict[str, list[int]]:
    out = {series: [0] * len(index) for series in COUNTS}
    for r in rows:
        if r["series"] in out and r["start"] in index:
            out[r["series"]][index[r["start"]]] += r["n"]
    return out


def _depth(samples: QuerySet[QueueDepth], chosen: Range, index: dict[datetime, int]) -> Any:
    """Return the deepest sample of each point (queues summed), None where none was taken."""
    out: dict[str, list[int | None]] = {d: [None] * len(index) for d in DEPTHS}
    # (the sums' names are not literals: rows read as mappings)
    per_minute: Iterable[Mapping[str, Any]] = samples.values("minute").annotate(
        **{d: Sum(d) for d in DEPTHS}
    )
    for s in per_minute:
        seconds = int(s["minute"].timestamp())
        start = datetime.fromtimestamp(seconds - seconds % chosen.step_s, tz=s["minute"].tzinfo)
        i = index.get(start)
        if i is None:
            continue
        for d in DEPTHS:
            out[d][i] = max(out[d][i] or 0, int(s[d] or 0))
    return out


def depth_of(counts: Mapping[str, int]) -> dict[str, int]:
    """Return a queue's depth (waiting, scheduled, running) from its live counts."""
    return {
        "waiting": counts.get("submitted", 0),
        "scheduled": counts.get("scheduled", 0),
        "running": counts.get("started", 0),
    }


def live_depth(queues: Iterable[str]) -> dict[str, int]:
    """Return the depth of `queues` summed, read from Redis now (the Queues table's read)."""
    total = dict.fromkeys(DEPTHS, 0)
    for _name, _paused, counts in services.queue_states(list(queues)):
        for d, n in depth_of(counts).items():
            total[d] += n
    return total


def chart_data(
    range_name: str,
    rollup: QuerySet[RollupCount],
    depth: QuerySet[QueueDepth],
    now: datetime | None = None,
    live: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Return the charts of one range from rollup rows and depth samples (already filtered);
    with `live`, the depth's last point (the one running now) is that read, so the chart ends
    where the tables beside it stand."""
    chosen = RANGES[range_name]
    points = slots(chosen, now or timezone.now())
    index = {at: i for i, at in enumerate(points)}
    rows = list(
        rollup.filter(span_s=chosen.step_s, start__gte=points[0])
        .values("start", "series", "bucket")
        .annotate(n=Sum("count"))
        .order_by()
    )
    return {
        "range": range_name,
        "step_s": chosen.step_s,
        "t": [int(at.timestamp()) for at in points],
        "throughput": _throughput(rows, index),
        **_durations(rows, index),
        "depth": _with_live(_depth(depth.filter(minute__gte=points[0]), chosen, index), live),
    }


def _with_live(
    series: dict[str, list[int | None]], live: Mapping[str, int] | None
) -> dict[str, list[int | None]]:
    if live is not None:
        for d in DEPTHS:
            series[d][-1] = live[d]
    return series


def task_stats(
    range_name: str, rollup: QuerySet[RollupCount], now: datetime | None = None
) -> list[dict[str, Any]]:
    """Return per task over the range: jobs completed and failed (for good), the failure rate
    and the run time p50 and p95 (ms) of completed jobs; the busiest task first.

    `rollup` holds per-queue rows (not the totals): one task's queues are added up.
    """
    chosen = RANGES[range_name]
    since = slots(chosen, now or timezone.now())[0]
    rows = (
        rollup.exclude(task=TOTAL)
        .filter(span_s=chosen.step_s, start__gte=since, series__in=["completed", "failed", RUN])
        .values("task", "series", "bucket")
        .annotate(n=Sum("count"))
        .order_by()
    )
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"completed": 0, "failed": 0})
    runs: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        if r["series"] == RUN:
            runs[r["task"]].append((r["bucket"], r["n"]))
        else:
            counts[r["task"]][r["series"]] += r["n"]
    out = []
    for task, c in counts.items():
        ended = c["completed"] + c["failed"]
        run = _percentiles(merge(runs.get(task, [])))
        out.append(
            {
                "task": task,
                "completed": c["completed"],
                "failed": c["failed"],
                "failure_rate": round(c["failed"] / ended, 4) if ended else 0.0,
                "run_p50_ms": run["p50"],
                "run_p95_ms": run["p95"],
            }
        )
    return sorted(out, key=lambda s: (-(s["completed"] + s["failed"]), s["task"]))


def choices(rollup: QuerySet[RollupCount], depth: QuerySet[QueueDepth]) -> dict[str, list[str]]:
    """Return the queues and tasks the pickers offer: those seen in the last week."""
    since = timezone.now() - timedelta(seconds=RANGES["week"].span_s)
    recent = rollup.filter(span_s=RANGES["week"].step_s, start__gte=since).exclude(queue=TOTAL)
    queues = set(recent.values_list("queue", flat=True).distinct())
    queues |= set(depth.filter(minute__gte=since).values_list("queue", flat=True).distinct())
    tasks = set(recent.exclude(task="").values_list("task", flat=True).distinct())
    return {"queues": sorted(queues), "tasks": sorted(tasks)}


def sample_depth(queues: Iterable[str] = (), at: datetime | None = None) -> int:
    """Record the waiting, scheduled and running jobs of every known queue and of `queues`.

    One sample per queue and minute: taken again within the minute (several runworker
    processes), the newest replaces it. Returns the number of queues sampled.
    """
    minute = (at or timezone.now()).replace(second=0, microsecond=0)
    names = sorted({*services.run_engine(lambda c: c.queues.names()), *queues})
    states = services.queue_states(names)
    for name, _paused, counts in states:
        QueueDepth.objects.update_or_create(minute=minute, queue=name, defaults=depth_of(counts))
    return len(states)
