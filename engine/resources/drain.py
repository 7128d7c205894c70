"""Drain a queue: cancel every job waiting in it when the drain began, any number, in chunks.

Each chunk is one atomic script (drain-11.lua) over one waiting structure: the ready ZSET, the
scheduled ZSET, the blocked SET, the ZSETs of jobs set aside for a task version and those of
concurrency keys waiting for their turn. A job counts as waiting before the drain when its
`submitted_at_ms` (server time: when it was submitted, or last became ready) is at or before
the drain's start; jobs enqueued (or made ready again) during the drain stay. Progress is kept
in the queue's `draining` HASH, which the queue page reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from ..ops.handle import Handle
from ..transport.connection import server_ms

log = logging.getLogger("engine.drain")

# Jobs one script call looks at: short enough that Redis answers others in between.
CHUNK = 1_000


async def waiting_total(client: Handle, queue: str) -> int:
    """Return how many jobs wait in the queue now (what a drain begun now would look at)."""
    counts = await client.queues.counts(queue)
    return counts["submitted"] + counts["scheduled"] + counts["blocked"]


async def status(client: Handle, queue: str) -> dict[str, str]:
    """Return the queue's last drain: state (running, done, failed), cancelled, waiting at
    the start, by whom, started_at_ms, finished_at_ms; {} when it was never drained."""
    got: Mapping[str, str] = await client.redis.hgetall(client.keys(queue).draining)  # type: ignore[assignment]
    return dict(got)


async def begin(client: Handle, queue: str, by: str) -> dict[str, str] | None:
    """Mark a drain of `queue` running and return its record; None when one already runs."""
    keys = client.keys(queue)
    started = {
        "state": "running",
        "cutoff_ms": str(await server_ms(client.redis)),
        "waiting": str(await waiting_total(client, queue)),
        "cancelled": "0",
        "by": by,
        "started_at_ms": str(int(time.time() * 1000)),
        "heartbeat_at_ms": str(int(time.time() * 1000)),
    }
    current = await status(client, queue)
    fresh_ms = int(time.time() * 1000) - 30_000
    if current.get("state") == "running" and int(current.get("heartbeat_at_ms", 0)) > fresh_ms:
        return None
    async with client.redis.pipeline(transaction=True) as pipe:
        pipe.delete(keys.draining)
        pipe.hset(keys.draining, mapping=started)  # type: ignore[arg-type]
        await pipe.execute()
    return started


async def run(client: Handle, queue: str, chunk: int = CHUNK) -> int:
    """Drain `queue` as `begin` recorded it (cutoff); return how many jobs were cancelled."""
    keys = client.keys(queue)
    s = client.settings
    cutoff_ms = int((await status(client, queue))["cutoff_ms"])
    cancelled = 0
    try:
        for source, kind in await _sources(client, queue):
            cursor = ""
            while True:
                cursor, n, _ = await client.scripts.drain(
                    keys,
                    events_maxlen=s.stream.emergency_maxlen,
                    ttl_ms=s.default_result_ttl_s * 1000,
                    cutoff_ms=cutoff_ms,
                    source_key=source,
                    source_kind=kind,
                    cursor=cursor,
                    max_jobs=chunk,
                )
                cancelled += n
                now_ms = str(int(time.time() * 1000))
                progress = {"cancelled": str(cancelled), "heartbeat_at_ms": now_ms}
                await client.redis.hset(keys.draining, mapping=progress)  # type: ignore[arg-type]
                if not cursor:
                    break
    except BaseException as exc:
        failed = {"state": "failed", "error": repr(exc)[:500]}
        await client.redis.hset(keys.draining, mapping=failed)  # type: ignore[arg-type]
        raise
    done = {"state": "done", "finished_at_ms": str(int(time.time() * 1000))}
    await client.redis.hset(keys.draining, mapping=done)  # type: ignore[arg-type]
    log.info("queue drained queue=%s cancelled=%d", queue, cancelled)
    return cancelled


async def _sources(client: Handle, queue: str) -> list[tuple[str, str]]:
    """Return every waiting structure of the queue, with its kind, in the order to walk them."""
    keys = client.keys(queue)
    tags: set[str] = await client.redis.smembers(keys.unserved)  # type: ignore[assignment]
    stats: Mapping[str, str] = await client.redis.hgetall(keys.stats)  # type: ignore[assignment]
    turns = sorted(name.partition("|")[2] for name in stats if name.startswith("turn|"))
    # Concurrency keys' waiting jobs first: cancelling an admitted job admits the next waiting
    # one into the ready ZSET, possibly behind the walk; with none left waiting, none is.
    return [
        *((turn, "zset") for turn in turns),
        *((keys.unserved_jobs(tag), "zset") for tag in sorted(tags)),
        (keys.submitted, "zset"),
        (keys.scheduled, "zset"),
        (keys.blocked, "set"),
    ]
