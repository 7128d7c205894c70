"""Read the engine's metrics: what the scripts counted, queue depths, workers, mirror lag.

The transition scripts count in each queue's stats HASH in the same atomic step as the
transition (common.lua's bury and observe, complete-11.lua, begin-2.lua), so the totals are
exact across any number of workers and restarts; this module only reads them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ..fields import both, either
from ..keys import QueueKeys, alive_key, worker_key, workers_key
from ..ops import gaps
from ..seam.scripts import BUCKETS_MS
from ..transport.connection import server_ms

# The live states a queue holds jobs in (the DLQ is reported on its own).
DEPTH_STATES: tuple[str, ...] = ("submitted", "scheduled", "blocked", "started")
# Width of one priority band of ready-ZSET scores (common.lua's ready_score).
_BAND = 10_000_000_000_000
# Priorities run from -100 to 100: at most this many bands to look at.
_MAX_BANDS = 201


@dataclass(frozen=True, slots=True)
class Histogram:
    """One task's histogram: cumulative counts by upper bound in seconds (last: inf), sum."""

    buckets: tuple[tuple[float, int], ...]
    sum_s: float

    @property
    def count(self) -> int:
        """Return the number of observations."""
        return self.buckets[-1][1]


@dataclass(frozen=True, slots=True)
class GroupLag:
    """What a consumer group of a queue's event stream has not acknowledged."""

    # Events not acknowledged (undelivered plus pending), and the age of the oldest (0: none).
    backlog: int
    lag_s: float


@dataclass(frozen=True, slots=True)
class QueueMetrics:
    """One queue's metrics."""

    queue: str
    # (task, terminal state) -> jobs that reached it, ever.
    jobs: dict[tuple[str, str], int]
    # task -> run time of completed jobs (the attempt that completed).
    run: dict[str, Histogram]
    # task -> wait of each begun attempt, from becoming ready (submitted_at_ms) to its start.
    wait: dict[str, Histogram]
    # live state (DEPTH_STATES) -> jobs now; submitted counts those waiting for their
    # concurrency key's turn too.
    depth: dict[str, int]
    dlq: int
    # Age of the oldest ready job at the head of a priority band (0: none ready).
    oldest_waiting_s: float
    stream_length: int
    # Events the mirror's consumer group has not acknowledged (undelivered + pending).
    mirror_backlog: int
    # Age of the oldest of those events (0: none).
    mirror_lag_s: float
    # The history's gaps, ever (trim-3.lua and the mirror): event entries trimmed before the
    # mirror read them (the hard cap was reached), jobs of those rebuilt from their hashes, and
    # jobs that could not be (hash gone, or past the missed SET's limit).
    gap_entries: int = 0
    gap_rebuilt: int = 0
    gap_lost: int = 0
    # Autoscaling: jobs a worker could claim now (ready, the queue not paused; not scheduled,
    # blocked, waiting for a concurrency key's turn or for their task version), the age of the
    # oldest of them, and the slots (concurrency) of the live workers serving the queue that
    # claim (not quiet, not stopping or retiring).
    runnable: int = 0
    oldest_runnable_s: float = 0.0
    worker_slots: int = 0
    # task@version -> jobs waiting for a worker with that version (claim-12.lua).
    waiting_for_version: dict[str, int] = field(default_factory=dict)
    # Every other consumer group read lately (Client.metrics: events.live_groups, such as the
    # transition hooks') -> its lag. The stream is trimmed only below what each acknowledged.
    groups: dict[str, GroupLag] = field(default_factory=dict)

    @property
    def runnable_per_slot(self) -> float:
        """Return the runnable backlog per live worker slot (with no slot: per one slot, so a
        queue with work and no worker asks for one)."""
        return self.runnable / max(self.worker_slots, 1)


@dataclass(frozen=True, slots=True)
class Metrics:
    """A snapshot of every queue's metrics and the workers alive."""

    queues: tuple[QueueMetrics, ...]
    workers_alive: int


def _histogram(counts: Mapping[str, int], sum_ms: int) -> Histogram:
    per_bound = dict.fromkeys([*BUCKETS_MS, math.inf], 0)
    for le, n in counts.items():
        bound = math.inf if le == "inf" else float(le)
        per_bound[next((b for b in BUCKETS_MS if b >= bound), math.inf)] += n
    total, out = 0, []
    for bound, n in per_bound.items():
        total += n
        out.append((bound / 1000, total))
    return Histogram(tuple(out), sum_ms / 1000)


def parse_stats(
    fields: Mapping[str, str],
) -> tuple[dict[tuple[str, str], int], dict[str, Histogram], dict[str, Histogram]]:
    """Return per-task terminal totals and the run and wait histograms from a stats HASH."""
    jobs: dict[tuple[str, str], int] = {}
    hists: dict[str, dict[str, dict[str, int]]] = {"run": {}, "wait": {}}
    sums: dict[str, dict[str, int]] = {"run": {}, "wait": {}}
    for name, value in fields.items():
        kind, _, rest = name.partition("|")
        task, _, tail = rest.rpartition("|")
        if not rest:
            continue
        if kind == "done":
            jobs[(task, tail)] = int(value)
        elif kind in hists and tail == "sum_ms":
            sums[kind][task] = int(value)
        elif kind in hists:
            hists[kind].setdefault(task, {})[tail] = int(value)
    run, wait = (
        {task: _histogram(c, sums[kind].get(task, 0)) for task, c in hists[kind].items()}
        for kind in ("run", "wait")
    )
    return jobs, run, wait


async def workers_alive(redis: Redis, prefix: str) -> int:
    """Return how many registered workers hold a live liveness key."""
    ids: list[str] = await redis.zrange(workers_key(prefix), 0, -1)  # type: ignore[assignment]
    if not ids:
        return 0
    async with redis.pipeline(transaction=False) as pipe:
        for worker_id in ids:
            pipe.exists(alive_key(prefix, worker_id))
        alive = await pipe.execute()
    return sum(1 for n in alive if n)


async def oldest_waiting_ms(redis: Redis, keys: QueueKeys, now_ms: int) -> int:
    """Return the age of the oldest ready job among the heads of its priority bands."""
    heads: list[str] = []
    low = "-inf"
    for _ in range(_MAX_BANDS):
        row = await redis.zrangebyscore(keys.submitted, low, "+inf", 0, 1, withscores=True)
        if not row:
            break
        heads.append(str(row[0][0]))
        low = str((int(row[0][1]) // _BAND + 1) * _BAND)
    if not heads:
        return 0
    async with redis.pipeline(transaction=False) as pipe:
        for job_id in heads:
            pipe.hmget(keys.job(job_id), both("submitted_at_ms"))
        stamps = [int(s) for row in await pipe.execute() if (s := either(row)[0])]
    return max(0, now_ms - min(stamps)) if stamps else 0


def _id_ms(stream_id: str) -> int:
    return int(stream_id.partition("-")[0])


async def mirror_lag(
    redis: Redis, keys: QueueKeys, group: str, now_ms: int
) -> tuple[int, int, int]:
    """Return the event stream's length, the group's backlog and the age (ms) of its oldest.

    The backlog is the entries not delivered yet (XINFO GROUPS `lag`; the stream's length when
    Redis cannot tell) plus those delivered and not acknowledged (`pending`). Without the group
    (no mirror ever started) every entry is backlog.
    """
    length = int(await redis.xlen(keys.events))
    if not length:
        return 0, 0, 0
    try:
        groups = await redis.xinfo_groups(keys.events)
    except ResponseError:
        groups = []
    found = next((g for g in groups if g["name"] == group), None)
    if found is None:
        first = await redis.xrange(keys.events, count=1)
        return length, length, max(0, now_ms - _id_ms(str(first[0][0]))) if first else 0
    pending = int(found["pending"])
    undelivered = length if found.get("lag") is None else int(found["lag"])
    oldest: str | None = None
    if pending:
        oldest = (await redis.xpending(keys.events, group))["min"]
    elif undelivered:
        after = await redis.xrange(
            keys.events, min=f"({found['last-delivered-id']}", max="+", count=1
        )
        oldest = str(after[0][0]) if after else None
    age = max(0, now_ms - _id_ms(oldest)) if oldest else 0
    return length, undelivered + pending, age


async def queue_metrics(
    redis: Redis,
    keys: QueueKeys,
    group: str,
    now_ms: int,
    slots: int = 0,
    others: Sequence[str] = (),
) -> QueueMetrics:
    """Return the metrics of one queue (`slots`: of the live workers serving it; `others`: the
    consumer groups besides the mirror's whose lag to report)."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.stats)
        pipe.zcard(keys.submitted)
        pipe.zcard(keys.scheduled)
        pipe.scard(keys.blocked)
        pipe.zcard(keys.started)
        pipe.zcard(keys.dlq)
        pipe.hget(keys.meta, "paused")
        pipe.smembers(keys.unserved)
        stats, *sizes, dlq, paused, unserved = await pipe.execute()
    jobs, run, wait = parse_stats(stats)
    depth = dict(zip(DEPTH_STATES, (int(n) for n in sizes), strict=True))
    runnable = 0 if paused == "1" else depth["submitted"]
    depth["submitted"] += int(stats.get("waiting_turn", 0)) + int(stats.get("waiting_version", 0))
    oldest_ms = await oldest_waiting_ms(redis, keys, now_ms)
    length, backlog, lag_ms = await mirror_lag(redis, keys, group, now_ms)
    groups: dict[str, GroupLag] = {}
    for name in others:
        _, behind, age_ms = await mirror_lag(redis, keys, name, now_ms)
        groups[name] = GroupLag(behind, age_ms / 1000)
    return QueueMetrics(
        keys.queue,
        jobs,
        run,
        wait,
        depth,
        int(dlq),
        oldest_ms / 1000,
        length,
        backlog,
        lag_ms / 1000,
        gap_entries=int(stats.get("gap_entries", 0)),
        gap_rebuilt=int(stats.get("gap_rebuilt", 0)),
        gap_lost=gaps.lost(stats),
        runnable=runnable,
        oldest_runnable_s=oldest_ms / 1000 if runnable else 0.0,
        worker_slots=slots,
        waiting_for_version=await _waiting_for_version(redis, keys, sorted(unserved)),
        groups=groups,
    )


async def _waiting_for_version(redis: Redis, keys: QueueKeys, tags: list[str]) -> dict[str, int]:
    """Return task@version -> jobs set aside for it (none listed at zero)."""
    if not tags:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        for tag in tags:
            pipe.zcard(keys.unserved_jobs(tag))
        sizes = await pipe.execute()
    return {tag: int(n) for tag, n in zip(tags, sizes, strict=True) if n}


async def worker_slots(redis: Redis, prefix: str) -> dict[str, int]:
    """Return queue -> slots (concurrency) of the live workers that claim from it."""
    ids: list[str] = await redis.zrange(workers_key(prefix), 0, -1)  # type: ignore[assignment]
    if not ids:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        for worker_id in ids:
            pipe.hmget(worker_key(prefix, worker_id), ["queues", "concurrency", "state"])
            pipe.exists(alive_key(prefix, worker_id))
        replies = await pipe.execute()
    slots: dict[str, int] = {}
    for (queues, concurrency, state), alive in zip(replies[::2], replies[1::2], strict=True):
        if not alive or not queues or state not in (None, "claiming"):
            continue
        for queue in queues.split(","):
            slots[queue] = slots.get(queue, 0) + int(concurrency or 0)
    return slots


async def read_metrics(
    redis: Redis,
    prefix: str,
    queues: Sequence[str],
    group: str = "mirror",
    others: Sequence[str] = (),
) -> Metrics:
    """Return the metrics of `queues` and the workers alive; `group` is the mirror's, `others`
    the other consumer groups whose lag to report."""
    now_ms = await server_ms(redis)
    slots = await worker_slots(redis, prefix)
    out = [
        await queue_metrics(redis, QueueKeys(prefix, q), group, now_ms, slots.get(q, 0), others)
        for q in queues
    ]
    return Metrics(tuple(out), await workers_alive(redis, prefix))
