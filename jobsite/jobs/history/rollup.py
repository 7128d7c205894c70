"""The charts' rollup: per slot, queue and task, states entered, retries and duration histograms.

The mirror calls `observe` for each job's new state changes (never a replayed one) and `write`
once per batch: one aggregated upsert adds the batch to every span of SPANS_S, so the hour,
day and week charts each read one row per point and series, whatever the throughput.

Each count is kept twice: for its queue and task, and in the totals row of its slot (queue and
task TOTAL), so a query over every queue reads one row per point too (`pick` chooses).

Durations go into fixed log-scale buckets (BUCKETS_PER_DOUBLING per power of two of
milliseconds), so percentiles over any range come from merged buckets (`percentile`), within
one bucket's width (about 19 %) of the exact value.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet

from jobsite.jobs.models import RollupCount

# Slot widths the rollup keeps: the hour chart reads 1-minute slots, the day chart 15-minute
# ones, the week chart hourly ones.
SPANS_S: tuple[int, ...] = (60, 900, 3600)
BUCKETS_PER_DOUBLING = 4
# The last bucket holds everything longer (2**40 ms is about 35 years).
MAX_BUCKET = 40 * BUCKETS_PER_DOUBLING
# An attempt that ends and goes again: from `started` back to a waiting state.
RETRY_TO = frozenset(("scheduled", "submitted"))
WAIT, RUN, RETRIED = "wait", "run", "retried"
# The queue and task of the totals rows (a queue name is never empty).
TOTAL = ""

# (minute start ms, queue, task, series, bucket) -> count
Tally = Counter[tuple[int, str, str, str, int]]


def bucket_of(ms: float) -> int:
    """Return the histogram bucket of a duration: 0 below 1 ms, then 4 per doubling."""
    if ms < 1:
        return 0
    return min(MAX_BUCKET, 1 + int(math.log2(ms) * BUCKETS_PER_DOUBLING))


def bucket_bounds_ms(bucket: int) -> tuple[float, float]:
    """Return the lower and upper bound (ms) of a bucket."""
    if bucket <= 0:
        return 0.0, 1.0
    return (
        2.0 ** ((bucket - 1) / BUCKETS_PER_DOUBLING),
        2.0 ** (bucket / BUCKETS_PER_DOUBLING),
    )


def percentile(buckets: Mapping[int, int], q: float) -> float | None:
    """Return the `q` quantile (0..1) in ms of a merged histogram (None when it is empty).

    The rank is found in its bucket and interpolated geometrically inside it.
    """
    total = sum(buckets.values())
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for bucket in sorted(buckets):
        n = buckets[bucket]
        if n <= 0:
            continue
        if seen + n >= rank:
            low, high = bucket_bounds_ms(bucket)
            part = (rank - seen) / n
            if bucket <= 0:
                return low + (high - low) * part
            growth: float = (high / low) ** part  # (float ** float is typed Any: complex)
            return low * growth
        seen += n
    return bucket_bounds_ms(max(buckets))[1]


def observe(
    tally: Tally, queue: str, task: str, merged: Sequence[dict[str, Any]], fresh: set[str]
) -> None:
    """Count the new changes `fresh` (ids) of one job into `tally`.

    `merged` is every change of the job known so far, oldest first: the queue wait of a claim
    runs from the change before it (the job became ready: submitted, or promoted at its run_at),
    the run time of an ended attempt from its start.
    """
    before: dict[str, Any] | None = None
    for t in merged:
        if t["id"] in fresh:
            at = int(t["at_ms"])
            minute = at - at % 60_000
            came, went = t["from"], t["to"]
            tally[(minute, queue, task, went, 0)] += 1
            if came == "started":
                if went in RETRY_TO:
                    tally[(minute, queue, task, RETRIED, 0)] += 1
                if before is not None and before["to"] == "started":
                    tally[(minute, queue, task, RUN, bucket_of(at - before["at_ms"]))] += 1
            elif went == "started" and before is not None and before["to"] == came:
                tally[(minute, queue, task, WAIT, bucket_of(at - before["at_ms"]))] += 1
        before = t


def spread(tally: Tally) -> list[tuple[int, int, str, str, str, int, int]]:
    """Return the rows to add: each minute's counts folded into every span, sorted."""
    rows: Counter[tuple[int, int, str, str, str, int]] = Counter()
    for (minute, queue, task, series, bucket), n in tally.items():
        for span_s in SPANS_S:
            start = minute - minute % (span_s * 1000)
            rows[(span_s, start, queue, task, series, bucket)] += n
            rows[(span_s, start, TOTAL, TOTAL, series, bucket)] += n
    return [(*key, n) for key, n in sorted(rows.items())]


def pick(
    rows: QuerySet[RollupCount], scope: list[str] | None, queue: str | None, task: str | None
) -> QuerySet[RollupCount]:
    """Return the rows answering a query: the totals for every queue and task, else the rows of
    the queues in `scope` (None: every queue), narrowed to `queue` and `task` when given."""
    if scope is None and not queue and not task:
        return rows.filter(queue=TOTAL, task=TOTAL)
    rows = rows.exclude(queue=TOTAL)
    if scope is not None:
        rows = rows.filter(queue__in=scope)
    if queue:
        rows = rows.filter(queue=queue)
    if task:
        rows = rows.filter(task=task)
    return rows


def add_totals(db: BaseDatabaseWrapper = connection) -> None:
    """Make the totals rows from the per-queue rows (rollups written before totals existed)."""
    q = db.ops.quote_name
    table = q(RollupCount._meta.db_table)
    key = ", ".join(q(c) for c in ("span_s", "start", "series", "bucket"))
    with db.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(q(c) for c in _COLUMNS)})"
            f" SELECT {q('span_s')}, {q('start')}, %s, %s, {q('series')}, {q('bucket')},"
            f" SUM({q('count')}) FROM {table} WHERE {q('queue')} <> %s GROUP BY {key}",
            [TOTAL, TOTAL, TOTAL],
        )


_COLUMNS = ("span_s", "start", "queue", "task", "series", "bucket", "count")


def write(tally: Tally) -> None:
    """Add a batch's tally to the rollup: one upsert statement for every span."""
    rows = spread(tally)
    if not rows:
        return
    q = connection.ops.quote_name
    table = q(RollupCount._meta.db_table)
    key = ", ".join(q(c) for c in _COLUMNS[:-1])
    count = q("count")
    sql = (
        f"INSERT INTO {table} ({', '.join(q(c) for c in _COLUMNS)})"
        f" VALUES ({', '.join(['%s'] * len(_COLUMNS))})"
        f" ON CONFLICT ({key}) DO UPDATE SET {count} = {table}.{count} + excluded.{count}"
    )
    adapt = connection.ops.adapt_datetimefield_value
    values = [
        (span, adapt(datetime.fromtimestamp(start / 1000, tz=UTC)), queue, task, s, b, n)
        for span, start, queue, task, s, b, n in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, values)


def merge(rows: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Return one histogram from (bucket, count) pairs."""
    out: dict[int, int] = {}
    for bucket, n in rows:
        out[bucket] = out.get(bucket, 0) + n
    return out
