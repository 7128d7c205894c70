"""The event reader: what it parses by position equals the stream's entries read by name."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from engine import Client, EngineSettings
from engine.resources.duties.feed import EventReader
from engine.stream.events import (
    CORE_FIELDS,
    SHARED_MAX,
    Event,
    shared,
    sortable_id,
    stream_id,
)
from engine.transport.connection import connect

from . import tasks as t
from .helpers import drain


async def _by_name(client: Client, queue: str) -> list[Event]:
    """Return every event of the stream parsed field by field (redis-py's XRANGE parse)."""
    entries = await client.redis.xrange(client.keys(queue).events)
    return [Event.from_entry(queue, eid, fields) for eid, fields in entries]


@pytest.mark.parametrize("protocol", [3, 2])
async def test_every_kind_of_event_reads_as_its_fields_say(
    client: Client, settings: EngineSettings, protocol: int
) -> None:
    await client.enqueue_many([t.logging_async.call(2, fail_first=True), t.progressing.call()])
    await drain(settings, [t.logging_async, t.progressing])
    expected = await _by_name(client, "default")
    kinds = {(e.from_state, e.to_state, bool(e.log), e.progress is not None) for e in expected}
    assert ("started", "started", True, False) in kinds  # log lines
    assert ("started", "started", False, True) in kinds  # progress
    assert any(e.error for e in expected)  # the failed first attempt

    if protocol == 3:
        redis = connect(settings, block_s=1.0)
    else:
        if "cluster" in settings.redis_url:
            pytest.skip("a RESP2 client of one node cannot read every slot of a cluster")
        redis = Redis.from_url(settings.redis_url, decode_responses=True, protocol=2)
    try:
        reader = EventReader(redis, settings, ["default"], group=f"resp{protocol}")
        await reader.ensure_groups()
        read = await reader.read(1000, None)
        assert read == expected
        await reader.ack(read)
        assert await reader.read(1000, None) == []
    finally:
        await redis.aclose()


def test_an_entry_of_other_fields_or_order_is_read_by_name() -> None:
    core = ["job", "j1", "from", "started", "to", "completed", "at", "5", "attempt", "1"]
    core += ["worker", "w", "error", ""]
    in_order = Event.from_flat("q", "5-0", core)
    assert (in_order.job, in_order.to_state, in_order.at_ms, in_order.attempt) == (
        "j1",
        "completed",
        5,
        1,
    )
    assert Event.from_flat("q", "5-0", core[2:] + core[:2]) == in_order  # names, not places
    more = Event.from_flat("q", "5-0", [*core, "message", "half", "progress", "50"])
    assert (more.job, more.progress, more.message) == ("j1", 50.0, "half")
    assert core[0::2] == CORE_FIELDS


async def test_a_batch_keeps_each_state_worker_and_hash_value_once(
    client: Client, settings: EngineSettings
) -> None:
    jobs = await client.enqueue_many([t.add.call(i, 1) for i in range(3)])
    await drain(settings, [t.add])
    redis = connect(settings, block_s=1.0)
    try:
        reader = EventReader(redis, settings, ["default"], group="shared")
        await reader.ensure_groups()
        read = await reader.read(1000, None)
        hashes = await reader.job_hashes("default", [job.id for job in jobs])
    finally:
        await redis.aclose()
    ends = [e for e in read if e.to_state == "completed"]
    assert len(ends) == 3 and ends[0].to_state is ends[1].to_state is ends[2].to_state
    assert ends[0].worker and ends[0].worker is ends[1].worker is ends[2].worker
    begun = [e for e in read if e.to_state == "started"]
    assert begun[0].to_state is ends[0].from_state  # one "started" for every event
    first, second = (hashes[job.id] for job in jobs[:2])
    assert first["state"] == "completed" and first["state"] is second["state"]
    assert first["worker"] is ends[0].worker and first["task"] is second["task"]
    assert first["args"] == "[0,1]" and first["args"] is not second["args"]  # not repeated
    for job in jobs:  # each job's events keep one copy of its id, read in one reply or not
        mine = [e for e in read if e.job == job.id]
        assert len(mine) == 3 and mine[0].job is mine[1].job is mine[2].job
    assert [e.id for e in read] == [
        eid for eid, _ in await client.redis.xrange(client.keys("default").events)
    ]  # the ids acks take, given back from the sortable key each event keeps


def test_a_sortable_id_gives_back_its_stream_id() -> None:
    for entry_id in ("0-0", "1-0", "1796140961201-3", "5-12345678901", "10-10"):
        key = sortable_id(entry_id)
        assert stream_id(key) == entry_id and len(key) >= 24
    assert sortable_id("9-1") < sortable_id("10-0") < sortable_id("10-2")  # sorts as text


def test_the_shared_texts_start_again_past_their_bound() -> None:
    kept = shared("".join(["bound-", "probe"]))
    assert shared("".join(["bound-", "probe"])) is kept
    for i in range(SHARED_MAX):
        shared(f"worker-{i}")
    again = shared("".join(["bound-", "probe"]))
    assert again == kept and again is not kept  # the table was cleared once it was full
