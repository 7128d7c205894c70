"""The event feed: the per-queue event streams read as one consumer of a group, and the
registry of the groups that read them (trimming waits for those read lately)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ...keys import QueueKeys, event_groups_key, queue_keys
from ...ops import gaps
from ...seam.scripts import scripts_for
from ...settings import EngineSettings
from ...stream.events import (
    IDLE_MS,
    JOBS_SHARED_MAX,
    Event,
    hash_from_json,
    ids_by_queue,
    sortable_id,
    stream_entries,
)
from ...transport.cluster import per_slot, slot_groups

# Most job ids one snapshot-1.lua call, one SSCAN or SCAN step takes.
SNAPSHOT_IDS = 1000
# A group not read for this long no longer holds trimming back (live_groups).
GROUP_STALE_MS = 10 * 60 * 1000


def _as_sent(response: Any, **_options: Any) -> Any:
    """Keep an XREADGROUP reply as Redis sent it (EventReader._events reads it)."""
    return response


async def _batches(items: AsyncIterator[str], size: int) -> AsyncIterator[list[str]]:
    """Yield what `items` gives, `size` at a time (memory bounded by `size`, whatever the total)."""
    batch: list[str] = []
    async for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


async def register_group(redis: Redis, prefix: str, group: str) -> None:
    """Record that `group` reads the event streams now (so trimming waits for it)."""
    await redis.hset(event_groups_key(prefix), group, int(time.time() * 1000))


async def live_groups(redis: Redis, prefix: str, now_ms: int | None = None) -> list[str]:
    """Return the registered consumer groups read within GROUP_STALE_MS (trimming honours them)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    seen = await redis.hgetall(event_groups_key(prefix))
    return sorted(str(g) for g, at in seen.items() if now_ms - int(at) <= GROUP_STALE_MS)


async def create_group(redis: Redis, stream: str, group: str, start: str) -> bool:
    """Create consumer group `group` on `stream` (made if missing) reading from `start` ("0":
    the first entry, "$": the end); tell whether this call created it (not there before)."""
    try:
        await redis.xgroup_create(stream, group, id=start, mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
        return False
    return True


async def create_groups_at_end(
    redis: Redis, prefix: str, queues: Iterable[str], group: str
) -> None:
    """Create `group` on the event stream of each of `queues` where it does not exist, at the
    stream's end (the entries already there are not read)."""
    for queue in queues:
        await create_group(redis, queue_keys(prefix, queue).events, group, "$")


class EventReader:
    """Read events of several queues as one consumer of a group; ack after they are applied.

    The reader parses XREADGROUP replies itself, by position (Event.from_flat), so it sets the
    client's reply handling for that command: give it a client of its own.
    """

    def __init__(
        self,
        redis: Redis,
        settings: EngineSettings,
        queues: Sequence[str],
        group: str = "mirror",
        consumer: str = "mirror-1",
    ) -> None:
        self.redis = redis
        self.keys = {q: QueueKeys(settings.prefix, q) for q in queues}
        self.group = group
        self.consumer = consumer
        self.scripts = scripts_for(redis, settings)
        redis.set_response_callback("XREADGROUP", _as_sent)
        self._queue_of = {k.events: q for q, k in self.keys.items()}
        # On a cluster whose slots split the streams: one XREADGROUP per slot (cluster.py).
        self.keys_events = streams = [k.events for k in self.keys.values()]
        self._reads = per_slot(redis, streams, self._read_group)
        self._groups = slot_groups(streams) if self._reads is not None else [streams]
        self._jobs: dict[str, str] = {}  # one copy of each job id read lately (JOBS_SHARED_MAX)

    async def ensure_groups(self) -> list[str]:
        """Create the consumer group on every stream (from the start) where it does not exist;
        return the queues whose group this call created."""
        created: list[str] = []
        for queue, keys in self.keys.items():
            if await create_group(self.redis, keys.events, self.group, "0"):
                created.append(queue)
        return created

    def _events(self, reply: Any) -> list[Event]:
        """Return the events of an XREADGROUP reply (entries deleted since delivery skipped)."""
        out: list[Event] = []
        jobs = self._jobs
        if len(jobs) >= JOBS_SHARED_MAX:
            jobs.clear()
        for stream, entries in stream_entries(reply):
            queue = self._queue_of[stream]
            out.extend(Event.from_flat(queue, eid, flat, jobs) for eid, flat in entries if flat)
        return out

    async def pending(self, count: int, min_idle_ms: int = IDLE_MS) -> list[Event]:
        """Return entries delivered but never acked: this consumer's, then idle ones of others."""
        own: list[Event] = []
        for group in self._groups:
            streams: dict[Any, Any] = dict.fromkeys(group, "0")
            own += self._events(
                await self.redis.xreadgroup(self.group, self.consumer, streams, count=count)
            )
        return own or await self.claim_idle(count, min_idle_ms)

    async def claim_idle(self, count: int, min_idle_ms: int = IDLE_MS) -> list[Event]:
        """Take over and return entries left unacked for `min_idle_ms` (their reader stopped)."""
        out: list[Event] = []
        for queue, keys in self.keys.items():
            reply = await self.redis.xautoclaim(
                keys.events, self.group, self.consumer, min_idle_ms, "0-0", count=count
            )
            out.extend(Event.from_entry(queue, eid, f) for eid, f in reply[1] if f)
        return out

    async def consumers(self) -> set[str]:
        """Return the names of the group's consumers on every stream."""
        names: set[str] = set()
        for keys in self.keys.values():
            names.update(
                c["name"] for c in await self.redis.xinfo_consumers(keys.events, self.group)
            )
        return names

    async def claim_from(self, consumer: str, count: int) -> list[Event]:
        """Take over and return up to `count` entries per stream `consumer` left unacked, idle
        or not (the caller knows that consumer is gone: its process died)."""
        out: list[Event] = []
        for queue, keys in self.keys.items():
            rows = await self.redis.xpending_range(
                keys.events, self.group, "-", "+", count, consumername=consumer
            )
            if not rows:
                continue
            ids: list[Any] = [row["message_id"] for row in rows]
            claimed: list[tuple[str, dict[str, str]]] = await self.redis.xclaim(  # type: ignore[assignment]
                keys.events, self.group, self.consumer, 0, ids
            )
            out.extend(Event.from_entry(queue, eid, f) for eid, f in claimed if f)
        return out

    async def read(self, count: int, block_ms: int | None) -> list[Event]:
        """Return up to `count` new events per stream, blocking up to `block_ms` (None: not)."""
        if self._reads is not None:
            replies = await self._reads.next(count, block_ms, block=block_ms is not None)
            return [event for reply in replies for event in self._events(reply)]
        return self._events(await self._read_group(self.keys_events, count, block_ms))

    async def _read_group(self, streams: list[str], count: int, block_ms: int | None) -> Any:
        """Read new entries of `streams` (one slot on a cluster)."""
        return await self.redis.xreadgroup(
            self.group, self.consumer, dict.fromkeys(streams, ">"), count=count, block=block_ms
        )

    async def finish_reads(self) -> None:
        """Wait for the reads still in flight (cluster only); the next `read` returns them."""
        if self._reads is not None:
            await self._reads.finish()

    async def close(self) -> None:
        """Cancel the reads still in flight (cluster only; their entries stay pending)."""
        if self._reads is not None:
            await self._reads.close()

    async def ack(self, events: Iterable[Event]) -> None:
        """Acknowledge applied events."""
        await self.ack_ids(ids_by_queue(events))

    async def current_hashes(self, events: Sequence[Event]) -> list[dict[str, str]]:
        """Return the hash of each event's job as Redis holds it now ({} when it is gone), in
        one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for e in events:
                pipe.hgetall(self.keys[e.queue].job(e.job))
            found: list[dict[str, str]] = await pipe.execute()
        return found

    async def ack_ids(self, by_queue: dict[str, list[str]]) -> None:
        """Acknowledge applied events by their stream ids (queue -> ids)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for queue, ids in by_queue.items():
                pipe.xack(self.keys[queue].events, self.group, *ids)
            await pipe.execute()

    async def behind_trim(self, queue: str) -> int:
        """Return how many entries this group never read were trimmed without being recorded.

        trim-3.lua records what it trims past the group (`gap_entries`, the missed SET); the
        scripts' emergency cap (twice the hard cap, reached only while no cleaner runs) and
        anything trimmed before the group existed are not. XINFO GROUPS' `lag` counts every
        entry added after those the group read, trimmed or not: while the group's last
        delivered id is older than the oldest entry kept, `lag` minus the stream's length is
        what it lost, ever (a group that never counted what it read: every entry trimmed). 0
        when that cannot be told now (entries it read are still kept).
        """
        keys = self.keys[queue]
        info = await self.redis.xinfo_stream(keys.events)
        length = int(info.get("length", 0))
        if int(info.get("entries-added", 0)) <= length:
            return 0
        groups = {g["name"]: g for g in await self.redis.xinfo_groups(keys.events)}
        group = groups.get(self.group)
        if group is None:
            return 0
        first = info.get("first-entry")
        oldest = first[0] if first else (info.get("last-generated-id") or "0-0")
        if sortable_id(group["last-delivered-id"]) >= sortable_id(oldest) and first:
            return 0
        if group.get("entries-read") is None:  # it never counted what it read: all trimmed
            lost = int(info["entries-added"]) - length
        elif group.get("lag") is None:
            return 0
        else:
            lost = int(group["lag"]) - length
        recorded = int(await self.redis.hget(keys.stats, "gap_entries") or 0)
        return max(0, lost - recorded)

    async def record_gap(self, queue: str, entries: int) -> None:
        """Count `entries` trimmed before this group read them (stats `gap_entries`)."""
        await self.redis.hincrby(self.keys[queue].stats, "gap_entries", entries)

    async def uncovered(self, queue: str) -> int:
        """Return how many jobs trim-3.lua could only count (`gap_unrecorded`: its missed SET was
        full) that no resync has covered yet (`gap_resynced`)."""
        fields = ("gap_unrecorded", "gap_resynced")
        values = await self.redis.hmget(self.keys[queue].stats, fields)
        return gaps.uncovered(dict(zip(fields, values, strict=True)))

    async def record_resync(self, queue: str, covered: int) -> None:
        """Count `covered` unrecorded jobs as rebuilt by a resync (stats `gap_resynced`)."""
        await self.redis.hincrby(self.keys[queue].stats, "gap_resynced", covered)

    async def has_missed(self, queue: str) -> bool:
        """Tell whether the missed SET holds jobs (their events were trimmed unread)."""
        return bool(await self.redis.scard(self.keys[queue].missed))

    async def missed(self, queue: str, size: int = SNAPSHOT_IDS) -> AsyncIterator[list[str]]:
        """Yield the jobs of the missed SET `size` at a time, while they are still in it.

        SSCAN, never the whole SET at once (it holds up to a third of the hard cap): the caller
        may remove each batch before the next; a job SSCAN gives again after its removal is
        left out.
        """
        key = self.keys[queue].missed
        async for batch in _batches(self.redis.sscan_iter(key, count=size), size):
            present = await self.redis.smismember(key, batch)
            if still := [job for job, here in zip(batch, present, strict=True) if here]:
                yield still

    async def positions(self, queue: str) -> tuple[str, str]:
        """Return the group's last delivered id and the stream's newest id (sortable_id)."""
        keys = self.keys[queue]
        info = await self.redis.xinfo_stream(keys.events)
        groups = {g["name"]: g for g in await self.redis.xinfo_groups(keys.events)}
        read = groups.get(self.group, {}).get("last-delivered-id") or "0-0"
        return sortable_id(read), sortable_id(info.get("last-generated-id") or "0-0")

    async def forget_missed(
        self, queue: str, job_ids: Sequence[str], rebuilt: int, lost: int
    ) -> None:
        """Remove jobs the history has caught up with from the missed SET; count them."""
        if not job_ids:
            return
        keys = self.keys[queue]
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.srem(keys.missed, *job_ids)
            pipe.hincrby(keys.stats, "gap_rebuilt", rebuilt)
            pipe.hincrby(keys.stats, "gap_lost", lost)
            await pipe.execute()

    async def forget_idle_consumers(self, idle_ms: int) -> int:
        """Delete the group's consumers idle for `idle_ms` with nothing pending (gone for good)."""
        gone = 0
        for keys in self.keys.values():
            for c in await self.redis.xinfo_consumers(keys.events, self.group):
                if int(c["pending"]) == 0 and int(c["idle"]) >= idle_ms:
                    await self.redis.xgroup_delconsumer(keys.events, self.group, c["name"])
                    gone += 1
        return gone

    async def job_hashes(self, queue: str, job_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """Return the current hash of each job that still exists in Redis, keyed by Job
        attribute name (engine/fields.py).

        One script call per 1,000 ids (snapshot-1.lua), each hash coming back as one JSON
        string: one reply to parse instead of one command and 2n strings per job, and Redis
        busy for a millisecond or two at a time.
        """
        keys = self.keys[queue]
        found: dict[str, dict[str, str]] = {}
        for start in range(0, len(job_ids), SNAPSHOT_IDS):
            chunk = list(job_ids[start : start + SNAPSHOT_IDS])
            rows = await self.scripts.snapshot(keys, job_ids=chunk)
            for job_id, text in zip(chunk, rows, strict=True):
                if text:
                    found[job_id] = hash_from_json(text)
        return found

    async def job_field(
        self, queue: str, job_ids: Sequence[str], name: str = "state"
    ) -> dict[str, str]:
        """Return one field (by Job attribute name) of each job of `queue` that still exists in
        Redis and has it.

        One script call per SNAPSHOT_IDS ids (snapshot-1.lua reading one field), not a
        command per job.
        """
        keys = self.keys[queue]
        found: dict[str, str] = {}
        for start in range(0, len(job_ids), SNAPSHOT_IDS):
            chunk = list(job_ids[start : start + SNAPSHOT_IDS])
            rows = await self.scripts.snapshot(keys, job_ids=chunk, field=name)
            found.update(
                (job_id, value) for job_id, value in zip(chunk, rows, strict=True) if value
            )
        return found

    async def job_ids(self, queue: str, size: int = SNAPSHOT_IDS) -> AsyncIterator[list[str]]:
        """Yield the id of every job hash of `queue`, `size` at a time (SCAN, never KEYS; a
        job may come twice)."""
        prefix = self.keys[queue].job_prefix
        keys = self.redis.scan_iter(match=self.keys[queue].job_pattern, count=size)
        async for batch in _batches(keys, size):
            yield [key[len(prefix) :] for key in batch]
