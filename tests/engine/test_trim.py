"""Event trimming (trim-3.lua via the cleaner): by the mirror's progress, within a hard cap."""

from __future__ import annotations

import dataclasses
import time

from engine import Client, EngineSettings
from engine.keys import event_groups_key
from engine.periodic.cleaner import Cleaner
from engine.resources.duties.feed import GROUP_STALE_MS, EventReader, register_group

from . import tasks as t


async def _trim(settings: EngineSettings, client: Client) -> int:
    cleaner = Cleaner(settings, client.redis, ["default"])
    return await cleaner.trim_events(client.keys("default"))


async def test_only_what_the_group_acknowledged_is_trimmed(
    client: Client, settings: EngineSettings
) -> None:
    keys = client.keys("default")
    reader = EventReader(client.redis, settings, ["default"], consumer="c1")
    await reader.ensure_groups()
    await client.enqueue_many([t.add.call(i, 1) for i in range(30)])
    read = await reader.read(20, None)
    await reader.ack(read[:10])
    assert await _trim(settings, client) == 0
    # Read but not acked (10) and never read (10) stay; the 10 acked go.
    assert await client.redis.xlen(keys.events) == 20
    await reader.ack(read[10:])
    await _trim(settings, client)
    assert await client.redis.xlen(keys.events) == 10
    assert [e.id for e in await reader.read(100, None)] == [
        str(i) for i, _ in await client.redis.xrange(keys.events)
    ]


async def test_the_hard_cap_trims_past_the_group_and_records_the_jobs(
    client: Client, settings: EngineSettings
) -> None:
    capped = dataclasses.replace(settings, events_maxlen=10)
    keys = client.keys("default")
    reader = EventReader(client.redis, capped, ["default"], consumer="c1")
    await reader.ensure_groups()
    jobs = await client.enqueue_many([t.add.call(i, 1) for i in range(30)])
    gap = await _trim(capped, client)
    print(f"hard cap 10, 30 unread entries: trimmed past the group={gap}")
    assert gap == 20
    assert await client.redis.xlen(keys.events) == 10
    # The missed SET holds a job per three entries of the cap (3): the rest are counted.
    missed = await client.redis.smembers(keys.missed)
    assert len(missed) == 3 and missed <= {j.id for j in jobs[:20]}
    stats = await client.redis.hgetall(keys.stats)
    assert (stats["gap_entries"], stats["gap_jobs"], stats["gap_unrecorded"]) == ("20", "3", "17")
    assert await reader.behind_trim("default") == 0  # recorded: nothing unaccounted
    # What the group reads next starts at the oldest entry kept.
    assert [e.job for e in await reader.read(100, None)] == [j.id for j in jobs[20:]]


async def test_without_the_group_the_stream_keeps_its_own_length(
    client: Client, settings: EngineSettings
) -> None:
    capped = dataclasses.replace(settings, events_kept_without_group=10)
    keys = client.keys("default")
    await client.enqueue_many([t.add.call(i, 1) for i in range(300)])
    assert await _trim(capped, client) == 0
    assert 10 <= await client.redis.xlen(keys.events) < 300  # MAXLEN ~: whole nodes
    assert not await client.redis.exists(keys.missed)


async def test_an_unrecorded_trim_past_the_group_is_told(
    client: Client, settings: EngineSettings
) -> None:
    keys = client.keys("default")
    reader = EventReader(client.redis, settings, ["default"], consumer="c1")
    await reader.ensure_groups()
    await client.enqueue_many([t.add.call(i, 1) for i in range(30)])
    await reader.ack(await reader.read(5, None))
    await client.redis.xtrim(
        keys.events, maxlen=10, approximate=False
    )  # as the scripts' emergency cap would
    assert await reader.behind_trim("default") == 15


async def test_a_live_hooks_group_holds_trimming_back_until_it_goes_stale(
    client: Client, settings: EngineSettings
) -> None:
    """The transition hooks' group keeps what it has not acknowledged, like the mirror's."""
    keys = client.keys("default")
    mirror = EventReader(client.redis, settings, ["default"], consumer="m1")
    await mirror.ensure_groups()
    hooks = EventReader(client.redis, settings, ["default"], "hooks", "h1")
    await hooks.ensure_groups()
    await register_group(client.redis, settings.prefix, "hooks")
    await client.enqueue_many([t.add.call(i, 1) for i in range(30)])
    await mirror.ack(await mirror.read(100, None))
    await hooks.ack(await hooks.read(10, None))
    await _trim(settings, client)
    assert await client.redis.xlen(keys.events) == 20  # the 20 the hooks never read stay
    # A hooks group nothing has read for GROUP_STALE_MS no longer holds anything back.
    stale_ms = int(time.time() * 1000) - GROUP_STALE_MS - 1000
    await client.redis.hset(event_groups_key(settings.prefix), "hooks", stale_ms)
    await _trim(settings, client)
    assert await client.redis.xlen(keys.events) == 0
