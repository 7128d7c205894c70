"""The engine on a 3-master Redis Cluster it starts itself (redis-server --cluster-enabled).

The queues "default", "a" and "b" hash to slots held by three different masters, so every
path that spans queues (waiting for work, the scheduler, the registry, event streams) is
exercised across nodes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from redis.crc import key_slot

from engine import Client, EngineSettings, JobState, QueueKeys, Worker
from engine.dev.devcluster import ClusterServer
from engine.errors import ConfigError, RedisUnavailable
from engine.periodic.cleaner import Cleaner
from engine.resources.duties.feed import EventReader
from engine.transport.cluster import TypedRedisCluster
from engine.transport.connection import connect, server_ms

from ..faultproxy import FaultProxy
from . import tasks as t
from .helpers import drain

QUEUES = ["default", "a", "b"]
TASKS = [t.add, t.flaky, t.waits]


@pytest.fixture
async def cc(cluster_settings: EngineSettings) -> AsyncIterator[Client]:
    async with Client(cluster_settings) as c:
        yield c


def test_the_queues_live_on_three_masters(redis_cluster: ClusterServer) -> None:
    import redis

    with redis.RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0]) as r:
        nodes = {r.get_node_from_key(QueueKeys("jobsite", q).marker).port for q in QUEUES}
    assert nodes == set(redis_cluster.ports)
    assert len({key_slot(q.encode()) for q in QUEUES}) == 3


async def test_a_cluster_url_gives_a_typed_cluster_client(cluster_settings: EngineSettings) -> None:
    redis = connect(cluster_settings)
    try:
        assert isinstance(redis, TypedRedisCluster)
        for queue in QUEUES:
            ms = await server_ms(redis, QueueKeys("jobsite", queue).repeat_due)
            assert abs(ms - time.time() * 1000) < 5_000
    finally:
        await redis.aclose()
    with pytest.raises(ConfigError, match="only database 0"):
        connect(EngineSettings.from_url(cluster_settings.redis_url + "/3"))


async def test_a_fresh_client_takes_many_commands_at_once(
    cluster_settings: EngineSettings,
) -> None:
    """redis-py 8.1 failed about one time in three here (closed sockets) without engine's
    `cluster.ready`: it worked out slots before learning the cluster."""
    keys = [QueueKeys(cluster_settings.prefix, q).meta for q in QUEUES]

    async def each_key(command: str, r: Any = None) -> list[Any]:
        """Run `command` on every key in one pipeline, of a fresh client unless `r`."""
        client = r or connect(cluster_settings)
        try:
            async with client.pipeline(transaction=False) as pipe:
                for key in keys:
                    getattr(pipe, command)(key)
                return await pipe.execute()  # type: ignore[no-any-return]
        finally:
            if r is None:
                await client.aclose()

    for _ in range(8):
        r = connect(cluster_settings)
        try:
            await asyncio.gather(*(r.hset(keys[i % 3], f"f{i}", i) for i in range(40)))
            assert await each_key("hlen", r) == [14, 13, 13]
        finally:
            await r.aclose()
        assert await each_key("delete") == [1, 1, 1]  # a fresh client's first use: a pipeline


async def test_a_dead_cluster_raises_the_typed_error() -> None:
    from engine.dev.devcluster import free_cluster_port

    settings = EngineSettings.from_url(f"redis+cluster://127.0.0.1:{free_cluster_port()}")
    redis = connect(settings)
    try:
        with pytest.raises(RedisUnavailable):
            await redis.get("x")
    finally:
        await redis.aclose()


async def test_one_worker_runs_jobs_of_queues_on_three_masters(
    cc: Client, cluster_settings: EngineSettings
) -> None:
    jobs = [await cc.enqueue(t.add.using(queue=q), n, n) for n, q in enumerate(QUEUES * 3)]
    worker = await drain(cluster_settings, TASKS, queues=QUEUES)
    assert worker.counters["completed"] == 9
    for n, job in enumerate(jobs):
        done = await cc.jobs.get(job.id)
        assert (done.state, done.result) == (JobState.COMPLETED, 2 * n)
    assert await cc.queues.names() == sorted(QUEUES)


async def test_an_idle_worker_wakes_for_a_job_on_any_master(
    cc: Client, cluster_settings: EngineSettings
) -> None:
    settings = EngineSettings.from_url(cluster_settings.redis_url, idle_wait_s=3.0)
    worker = Worker(settings, TASKS, queues=QUEUES)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.5)  # every queue dry: the worker blocks on each master
        for queue in ("b", "a", "default"):
            started = time.monotonic()
            job = await cc.enqueue(t.add.using(queue=queue), 1, 2)
            assert (await cc.jobs.wait(job.id, timeout_s=2.0)).result == 3
            assert time.monotonic() - started < 1.0  # woken, not the 3 s idle wait
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)


async def test_delayed_jobs_and_retries_run_through_the_scheduler(
    cc: Client, cluster_settings: EngineSettings
) -> None:
    later = await cc.enqueue(t.add.using(queue="b", delay_s=0.3), 2, 3)
    flaky = await cc.enqueue(t.flaky.using(queue="a", retry_delay_s=0.01))
    assert (await cc.jobs.get(later.id)).state is JobState.SCHEDULED
    await drain(cluster_settings, TASKS, queues=QUEUES)
    assert (await cc.jobs.get(later.id)).result == 5
    failed = await cc.jobs.get(flaky.id)
    assert (failed.state, failed.attempt) == (JobState.FAILED, 4)


async def test_repeatables_are_added_and_fire(cc: Client, cluster_settings: EngineSettings) -> None:
    for queue in ("a", "b"):
        await cc.repeats.add(f"tick-{queue}", t.add.using(queue=queue).call(1, 1), every_s=0.1)
    [(rep, due)] = await cc.repeats.list("a")
    assert rep.name == "tick-a" and due is not None
    worker = Worker(cluster_settings, TASKS, queues=QUEUES)
    running = asyncio.create_task(worker.run())
    deadline = time.monotonic() + 15  # every 0.1 s once the worker is up (after its children)
    while time.monotonic() < deadline:
        done = [(await cc.queues.counts(queue))["completed_total"] for queue in ("a", "b")]
        if min(done) >= 3:
            break
        await asyncio.sleep(0.05)
    worker.stop()
    await asyncio.wait_for(running, 10)
    assert min(done) >= 3, done
    await cc.repeats.pause("b", "tick-b")
    assert await cc.repeats.remove("a", "tick-a")
    assert [due for _, due in await cc.repeats.list("b")] == [None]


async def test_cancel_and_the_cleaner(cc: Client, cluster_settings: EngineSettings) -> None:
    later = await cc.enqueue(t.add.using(queue="b", delay_s=600), 1, 1)
    assert await cc.jobs.cancel([later.id]) == {later.id: "cancelled"}
    assert (await cc.jobs.get(later.id)).state is JobState.CANCELLED
    short = await cc.enqueue(t.add.using(queue="a", ttl_s=0.01), 1, 1)
    await asyncio.sleep(0.05)
    await Cleaner(cluster_settings, cc.redis, QUEUES).tick()
    assert (await cc.jobs.get(short.id)).state is JobState.EXPIRED


async def test_flows_on_their_queues_master(cc: Client, cluster_settings: EngineSettings) -> None:
    for queue in ("a", "b"):
        parent = t.add.using(queue=queue).call(1, 2)
        child = t.add.using(queue=queue, depends_on=[parent]).call(3, 4)
        await cc.enqueue_flow([child, parent])
        assert (await cc.jobs.get(child.id)).state is JobState.BLOCKED
    await drain(cluster_settings, TASKS, queues=QUEUES)
    assert (await cc.queues.counts("a"))["completed_total"] == 2
    assert (await cc.queues.counts("b"))["completed_total"] == 2


async def test_event_streams_are_read_per_slot(
    cc: Client, cluster_settings: EngineSettings
) -> None:
    reader = EventReader(cc.redis, cluster_settings, QUEUES, consumer="c1")
    try:
        await reader.ensure_groups()
        assert await reader.read(100, None) == []
        for queue in QUEUES:
            await cc.enqueue(t.add.using(queue=queue), 1, 1)
        seen: set[str] = set()
        deadline = time.monotonic() + 5
        while len(seen) < 3 and time.monotonic() < deadline:
            events = await reader.read(100, 200)
            seen |= {e.queue for e in events}
            await reader.ack(events)
        assert seen == set(QUEUES)
        assert await reader.pending(100, min_idle_ms=0) == []
    finally:
        await reader.close()


@pytest.fixture
def proxied_cluster() -> Iterator[tuple[ClusterServer, list[FaultProxy]]]:
    """A cluster of its own whose nodes announce a fault proxy's port each: clients reach
    every node through a proxy the test can reset."""
    import redis

    with ClusterServer() as cluster:
        proxies = [FaultProxy(port) for port in cluster.ports]
        try:
            for port, proxy in zip(cluster.ports, proxies, strict=True):
                with redis.Redis(port=port) as r:
                    r.config_set("cluster-announce-port", proxy.port)
            wanted = {p.port for p in proxies}
            deadline = time.monotonic() + 10
            for port in cluster.ports:  # every node tells the proxies' ports (gossip)
                with redis.Redis(port=port) as r:
                    while {int(s[2][1]) for s in r.execute_command("CLUSTER SLOTS")} != wanted:
                        assert time.monotonic() < deadline, "the announced ports did not spread"
                        time.sleep(0.05)
            yield cluster, proxies
        finally:
            for proxy in proxies:
                proxy.close()


async def _enqueue_after_idle_close(settings: EngineSettings, close: Callable[[], int]) -> None:
    """Pool a connection to every master, `close` them while idle, then enqueue 20 jobs per
    queue: none may fail."""
    async with Client(settings) as client:
        for q in QUEUES:
            await client.enqueue(t.add.using(queue=q), 0, 0)
        assert close() >= len(QUEUES)
        await asyncio.sleep(0.1)  # the close reaches the client while its connections sit idle
        for i in range(20):
            for q in QUEUES:
                await client.enqueue(t.add.using(queue=q), i, i)


def _submitted(ports: list[int]) -> list[int]:
    """Return the jobs waiting in each queue, read from the nodes themselves (the ledger)."""
    import redis

    with redis.RedisCluster(host="127.0.0.1", port=ports[0]) as r:
        return [int(r.zcard(QueueKeys("jobsite", q).submitted)) for q in QUEUES]


async def test_connections_the_server_closed_while_idle_are_replaced_before_use(
    cluster_settings: EngineSettings, redis_cluster: ClusterServer
) -> None:
    """CLIENT KILL (FIN) on every node while the client's connections sit in its pools:
    redis-py's cluster nodes check nothing at checkout but `should_reconnect`."""
    import redis

    def kill() -> int:
        killed = 0
        for port in redis_cluster.ports:
            with redis.Redis(port=port) as r:
                killed += int(r.client_kill_filter(_type="normal", skipme=True))
        return killed

    await _enqueue_after_idle_close(cluster_settings, kill)
    assert _submitted(redis_cluster.ports) == [21, 21, 21]


async def test_connections_reset_while_idle_are_replaced_before_use(
    proxied_cluster: tuple[ClusterServer, list[FaultProxy]],
) -> None:
    """RST on every pooled connection, at the socket (the proxies), while they sit idle."""
    cluster, proxies = proxied_cluster
    url = "redis+cluster://" + ",".join(f"127.0.0.1:{p.port}" for p in proxies)
    await _enqueue_after_idle_close(
        EngineSettings.from_url(url), lambda: sum(p.reset_all() for p in proxies)
    )
    assert _submitted(cluster.ports) == [21, 21, 21]
