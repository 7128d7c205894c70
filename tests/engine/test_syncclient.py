"""The sync client: the async Client's enqueue on the caller's thread, on every kind of URL."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import (
    Client,
    ConfigError,
    DuplicateJob,
    EngineSettings,
    JobIdTaken,
    JobState,
    RedisUnavailable,
    SyncClient,
    UnknownParent,
)
from engine.dev.devcluster import ClusterServer
from engine.dev.devserver import free_port

from . import tasks as t
from .helpers import drain
from .sentinels import SentinelSet


@pytest.fixture
def sync(settings: EngineSettings) -> Iterator[SyncClient]:
    with SyncClient(settings) as client:
        yield client


async def test_a_sync_enqueue_is_the_async_one(
    sync: SyncClient, client: Client, settings: EngineSettings
) -> None:
    job = await asyncio.to_thread(sync.enqueue, t.add, 2, 3)
    later = await asyncio.to_thread(sync.enqueue, t.add.using(delay_s=60), 1, 1)
    assert job.state is JobState.SUBMITTED and later.state is JobState.SCHEDULED
    assert await client.queues.names() == ["default"]
    await client.jobs.cancel([later.id])
    await drain(settings, [t.add])
    assert (await client.jobs.get(job.id)).result == 5


async def test_chosen_ids_dedup_and_flows_keep_their_rules(
    sync: SyncClient, client: Client
) -> None:
    chosen = t.add.using(job_id="order-7")
    await asyncio.to_thread(sync.enqueue, chosen, 1, 1)
    with pytest.raises(DuplicateJob):
        await asyncio.to_thread(sync.enqueue, chosen, 1, 1)
    with pytest.raises(JobIdTaken):  # the sync client reserved it for its queue
        await client.enqueue(t.add.using(job_id="order-7", queue="other"), 1, 1)
    deduped = t.add.using(deduplication={"id": "d1"})
    first = await asyncio.to_thread(sync.enqueue, deduped, 1, 1)
    again = await asyncio.to_thread(sync.enqueue, deduped, 2, 2)
    assert again.id == first.id
    with pytest.raises(UnknownParent):
        await asyncio.to_thread(sync.enqueue, t.add.using(depends_on=["nope"]), 1, 1)
    with pytest.raises(ConfigError, match="one queue"):
        sync.enqueue_flow([t.add.call(1, 1), t.add.using(queue="other").call(1, 1)])
    parent = t.add.call(1, 1)
    child = t.add.using(depends_on=[parent]).call(2, 2)
    done = await asyncio.to_thread(sync.enqueue_flow, [child, parent])
    assert {j.state for j in done} == {JobState.SUBMITTED, JobState.BLOCKED}
    assert done[0].flow_id == done[1].flow_id is not None


def test_threads_share_one_client(sync: SyncClient, settings: EngineSettings) -> None:
    ids: list[str] = []

    def many() -> None:
        ids.extend(sync.enqueue(t.add, i, i).id for i in range(20))

    threads = [threading.Thread(target=many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(ids)) == 160
    assert sync.redis.zcard(sync._enqueuer.keys("default").submitted) == 160


def test_connections_held_at_hand_survive_being_dropped_by_the_server(sync: SyncClient) -> None:
    # The enqueue keeps its connections out of the pool; ones the server closed (a restart, a
    # `timeout`, CLIENT KILL) connect again instead of failing the next enqueue.
    if sync._held is None:
        pytest.skip("on a cluster the sync client keeps redis-py's own path")

    def burst() -> None:
        for i in range(5):
            sync.enqueue(t.add, i, i)

    threads = [threading.Thread(target=burst) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = len(sync._held._idle)
    assert 1 <= held <= 4
    killed = sync.redis.client_kill_filter(_type="normal", skipme=True)
    assert killed >= held
    for i in range(held + 1):  # each held connection in turn
        assert sync.enqueue(t.add, i, i).state is JobState.SUBMITTED
    # An error reply (read whole) leaves the connection held; NOSCRIPT loads the script again.
    sync.redis.execute_command("SCRIPT", "FLUSH")
    assert sync.enqueue(t.add, 1, 1).state is JobState.SUBMITTED  # NOSCRIPT, loaded again
    with pytest.raises(Exception, match="unknown command"):
        sync._held.execute_command("NO-SUCH-COMMAND")
    assert len(sync._held._idle) <= held


def test_a_dead_redis_raises_the_typed_error() -> None:
    settings = EngineSettings.from_url(f"redis://127.0.0.1:{free_port()}/0")
    with SyncClient(settings) as sync, pytest.raises(RedisUnavailable, match="cannot reach"):
        sync.enqueue(t.add, 1, 1)


async def test_a_cluster_url(
    redis_cluster: ClusterServer, cluster_settings: EngineSettings
) -> None:
    with SyncClient(cluster_settings) as sync:
        jobs = [sync.enqueue(t.add.using(queue=q), 1, 2) for q in ("default", "a", "b")]
    async with Client(cluster_settings) as client:
        assert await client.queues.names() == ["a", "b", "default"]
        for job in jobs:
            assert (await client.jobs.get(job.id, job.queue)).state is JobState.SUBMITTED
    with pytest.raises(ConfigError, match="only database 0"):
        SyncClient(EngineSettings.from_url(cluster_settings.redis_url + "/3"))


@pytest.mark.chaos
async def test_a_sentinel_url(tmp_path: Path) -> None:
    with SentinelSet(tmp_path) as deployment:
        settings = EngineSettings.from_url(deployment.url)
        with SyncClient(settings) as sync:
            job = sync.enqueue(t.add, 1, 2)
            assert sync.redis.connection_pool.connection_kwargs["db"] == 0
        async with Client(settings) as client:
            assert (await client.jobs.get(job.id)).state is JobState.SUBMITTED
            # Its scripts keep redis-py's checkouts: that is how a failover is noticed.
            assert client.scripts.raw.run is client.redis
