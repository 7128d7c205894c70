"""The Client's calls the Django app's services make instead of raw Redis commands: ping, a
SCAN step over a queue's job hashes (one master of a cluster), history gaps, the missed SET and
the DLQ size sample of queue health."""

from __future__ import annotations

import pytest

from engine import Client, EngineSettings, sample_dlq

from . import tasks as t


async def _scan_all(client: Client, queue: str) -> set[str]:
    found: set[str] = set()
    cursor = 0
    while True:
        cursor, ids = await client.jobs.scan_ids(queue, cursor, count=2)
        found.update(ids)
        if cursor == 0:
            return found


@pytest.mark.parametrize("where", ["standalone", "cluster"])
async def test_scan_gaps_and_missed(
    where: str, settings: EngineSettings, request: pytest.FixtureRequest
) -> None:
    if where == "cluster":
        settings = request.getfixturevalue("cluster_settings")
    async with Client(settings) as client:
        await client.ping()
        made = {(await client.enqueue(t.add.using(queue=q), 1, 2)).id for q in ("a", "a", "b")}
        a = await _scan_all(client, "a")
        b = await _scan_all(client, "b")
        assert a | b == made and len(a) == 2 and len(b) == 1
        assert await client.queues.history_gaps("a") == {"entries": 0, "rebuilt": 0, "lost": 0}
        await client.redis.hset(
            client.keys("a").stats, mapping={"gap_lost": 2, "gap_unrecorded": 1}
        )
        assert (await client.queues.history_gaps("a"))["lost"] == 3
        await client.jobs.mark_missed("a", [])  # nothing to mark: no command
        await client.jobs.mark_missed("a", sorted(a))
        assert await client.redis.smembers(client.keys("a").missed) == a


async def test_the_dlq_sample_keeps_a_window(client: Client) -> None:
    assert await sample_dlq(client, "q", 3, window_s=60, record=False) == 3  # none recorded
    assert await sample_dlq(client, "q", 3, window_s=60, record=True) == 3  # a window begins
    assert await sample_dlq(client, "q", 7, window_s=60, record=True) == 3  # its start stays
    assert await sample_dlq(client, "q", 9, window_s=0, record=True) == 3  # a new one begins
    assert await sample_dlq(client, "q", 9, window_s=60, record=False) == 9
