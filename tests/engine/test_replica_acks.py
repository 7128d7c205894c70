"""Writes acknowledged by a replica (EngineSettings.replica_acks): WAIT after each script call
that writes, on the connection that made the write.

A private master (`--repl-diskless-sync-delay 0`) with one replica; pausing the replica
(SIGSTOP) leaves it connected but silent, so the master keeps counting it while it
acknowledges nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.asyncio

from engine import (
    Client,
    ConfigError,
    EngineSettings,
    JobContext,
    JobState,
    QueueKeys,
    RedisRefused,
    RedisUnavailable,
    ReplicaAckTimeout,
    SyncClient,
    Worker,
    task,
)
from engine.dev.devcluster import ClusterServer
from engine.dev.devserver import RedisServer, start_replica
from engine.fields import both, either
from engine.keys import ack_fence_key
from engine.transport.faults import Fault, classify

from . import tasks as t
from .helpers import command_calls, drain, reset_stats, sync_redis

TIMEOUT_MS = 300
# The task `gated` waits on this event of the test's loop; `runs` lists the ids it started.
GATE: dict[str, asyncio.Event] = {}
runs: list[str] = []


@task(name="replica_acks.gated", takes_context=True)
async def gated(job: JobContext) -> str:
    runs.append(job.id)
    await GATE["open"].wait()
    return "done"


@dataclass
class Pair:
    """A master and its replica."""

    master: RedisServer
    replica: RedisServer

    def settings(self, **overrides: Any) -> EngineSettings:
        values = {
            "replica_acks": 1,
            "replica_ack_timeout_ms": TIMEOUT_MS,
            "idle_wait_s": 0.2,
            "scheduler_interval_s": 0.05,
            **overrides,
        }
        return EngineSettings.from_url(self.master.url, **values)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop the replica (SIGSTOP) for the block: connected, acknowledging nothing."""
        assert self.replica.process is not None
        os.kill(self.replica.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.replica.process.pid, signal.SIGCONT)

    def job_on(self, server: RedisServer, job_id: str) -> dict[str, str | None]:
        """Return state and result of a job's hash as `server` holds it ({} if gone)."""
        key = QueueKeys("jobsite", "default").job(job_id)
        with redis.Redis(port=server.port, decode_responses=True) as r:
            state, result = either(r.hmget(key, both("state", "result")))
        return {} if state is None else {"state": state, "result": result}


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    master = RedisServer(args=("--repl-diskless-sync-delay", "0")).start()
    try:
        replica = start_replica(master)
    except BaseException:
        master.cleanup()
        raise
    try:
        yield Pair(master, replica)
    finally:
        replica.cleanup()
        master.cleanup()


@pytest.fixture
def fresh(pair: Pair) -> Pair:
    """The pair, flushed (the replica follows), its command counts reset."""
    with redis.Redis(port=pair.master.port) as r:
        r.flushall()
        r.execute_command("WAIT", 1, 5000)
        r.config_resetstat()
    runs.clear()
    return pair


def reset_waits(pair: Pair) -> None:
    with redis.Redis(port=pair.master.port) as r:
        r.config_resetstat()


def waits(pair: Pair) -> int:
    """Return the WAIT commands the master ran since the stats were reset."""
    with redis.Redis(port=pair.master.port, decode_responses=True) as r:
        return command_calls(r, "wait")


async def until(check: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_settings_validate_the_acks() -> None:
    assert EngineSettings().replica_acks == 0
    assert EngineSettings().replica.wait_s == 0
    assert EngineSettings(replica_acks=2, replica_ack_timeout_ms=250).replica.wait_s == 0.25
    for bad in ({"replica_acks": -1}, {"replica_acks": True}, {"replica_acks": 1.5}):
        with pytest.raises(ConfigError, match="replica_acks"):
            EngineSettings(**bad)  # type: ignore[arg-type]
    for bad_ms in (0, -5, 1.5):
        with pytest.raises(ConfigError, match="replica_ack_timeout_ms"):
            EngineSettings(replica_ack_timeout_ms=bad_ms)  # type: ignore[arg-type]


def test_the_fence_key_shares_the_slot_of_the_queue() -> None:
    keys = QueueKeys("jobsite", "default")
    assert ack_fence_key(keys.submitted) == "jobsite:{default}:ack_fence"
    assert ack_fence_key("plain") == "{plain}:ack_fence"


async def test_without_acks_no_wait_is_sent(settings: EngineSettings) -> None:
    """replica_acks=0, the default: not one WAIT, whatever runs (enqueue, claim, begin,
    complete, the cleaner and scheduler)."""
    with sync_redis(settings.redis_url, decode_responses=True) as r:
        reset_stats(r)
        async with Client(settings) as client:
            jobs = [await client.enqueue(t.add, i, 1) for i in range(5)]
            await asyncio.to_thread(_sync_enqueue, settings)
            await drain(settings, [t.add])
            assert [(await client.jobs.get(j.id)).state for j in jobs] == [JobState.COMPLETED] * 5
        assert command_calls(r, "evalsha") > 10
        assert command_calls(r, "wait") == 0


def _sync_enqueue(settings: EngineSettings) -> None:
    with SyncClient(settings) as sync:
        sync.enqueue(t.add, 1, 1)


async def test_an_acked_enqueue_and_run_are_on_the_replica_when_answered(fresh: Pair) -> None:
    settings = fresh.settings()
    async with Client(settings) as client:
        await client.enqueue(t.add, 0, 0)  # loads the script (NOSCRIPT: its WAIT is sent again)
        reset_waits(fresh)
        job = await client.enqueue(t.add, 2, 3)
        # Answered: the replica holds it already (no waiting for replication here).
        assert fresh.job_on(fresh.replica, job.id)["state"] == "submitted"
        assert waits(fresh) == 1  # the submit's
        await drain(settings, [t.add])
        assert (await client.jobs.get(job.id)).result == 5
        # The completion's WAIT came back before the worker went on: the replica has it.
        assert fresh.job_on(fresh.replica, job.id) == {"state": "completed", "result": "5"}
    assert waits(fresh) >= 3  # submit, claim, complete (and the worker's other writes)


async def test_a_sync_enqueue_waits_for_the_replica_too(fresh: Pair) -> None:
    with SyncClient(fresh.settings()) as sync:
        await asyncio.to_thread(sync.enqueue, t.add, 0, 0)  # loads the script
        reset_waits(fresh)
        job = await asyncio.to_thread(sync.enqueue, t.add, 1, 1)
    assert fresh.job_on(fresh.replica, job.id)["state"] == "submitted"
    assert waits(fresh) == 1


async def test_a_paused_replica_times_the_enqueue_out(fresh: Pair) -> None:
    """Several held connections, the replica paused: the enqueue's WAIT follows its write on
    the same connection, and raises after the timeout (a WAIT on another connection, which made
    no write, would have counted the paused replica and answered 1 at once)."""
    settings = fresh.settings()
    async with Client(settings) as client:
        await asyncio.gather(*(client.enqueue(t.add, i, i) for i in range(6)))  # 6 connections
        with fresh.paused():
            started = time.monotonic()
            with pytest.raises(ReplicaAckTimeout) as raised:
                await client.enqueue(t.add.using(job_id="during-pause"), 1, 2)
            took_s = time.monotonic() - started
            with SyncClient(settings) as sync, pytest.raises(ReplicaAckTimeout):  # Django's path
                await asyncio.to_thread(sync.enqueue, t.add, 1, 1)
        error = raised.value
        assert (error.acked, error.wanted) == (0, 1) and f"within {TIMEOUT_MS} ms" in str(error)
        # Retried as any refusal: the caller keeps its work and backs off.
        assert isinstance(error, RedisRefused) and isinstance(error, RedisUnavailable)
        assert classify(error) is Fault.REFUSED
        assert TIMEOUT_MS / 1000 * 0.9 <= took_s < 5
        # The master made the write: not acknowledged is not undone.
        assert (await client.jobs.get("during-pause")).state is JobState.SUBMITTED


def test_wait_counts_only_the_writes_of_its_own_connection(fresh: Pair) -> None:
    """Why WAIT rides on the write's connection: on another one it says 1 at once while the
    write it is meant to cover never reached the paused replica."""
    with redis.Redis(port=fresh.master.port, single_connection_client=True) as writer:
        writer.ping()
        with fresh.paused(), socket.create_connection(("127.0.0.1", fresh.master.port)) as other:
            writer.set("k", "v")
            # A connection that sent nothing else: what a pool may hand a separate call.
            other.sendall(b"*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$3\r\n100\r\n")
            assert other.recv(64) == b":1\r\n"
            assert writer.execute_command("WAIT", 1, 100) == 0


async def test_a_client_without_held_connections_pipelines_its_wait(fresh: Pair) -> None:
    """A client the engine did not make (redis-py's own pool, like Sentinel's): the call and its
    WAIT go as one pipeline, on one connection."""
    settings = fresh.settings()
    plain = redis.asyncio.Redis(port=fresh.master.port, decode_responses=True)
    async with Client(settings, redis=plain) as client:
        await client.enqueue(t.add, 0, 0)  # loads the script
        reset_waits(fresh)
        await asyncio.gather(*(client.enqueue(t.add, i, i) for i in range(4)))
        assert waits(fresh) == 4
        with fresh.paused(), pytest.raises(ReplicaAckTimeout):
            await client.enqueue(t.add, 1, 1)


async def test_noscript_loads_the_script_and_waits(fresh: Pair) -> None:
    settings = fresh.settings()
    async with Client(settings) as client:
        await client.enqueue(t.add, 1, 1)
        with redis.Redis(port=fresh.master.port) as r:
            r.script_flush()
        job = await client.enqueue(t.add, 2, 2)  # NOSCRIPT, SCRIPT LOAD, then the call again
        assert fresh.job_on(fresh.replica, job.id)["state"] == "submitted"
    with SyncClient(settings) as sync:
        with redis.Redis(port=fresh.master.port) as r:
            r.script_flush()
        done = await asyncio.to_thread(sync.enqueue, t.add, 3, 3)
    assert fresh.job_on(fresh.replica, done.id)["state"] == "submitted"


async def test_after_a_timeout_a_retry_that_writes_nothing_still_waits(fresh: Pair) -> None:
    """A retry that finds its work done writes nothing; the fence write before its WAIT makes
    it wait for the earlier write still, until one fenced call is acknowledged."""
    settings = fresh.settings()
    async with Client(settings) as client:
        with fresh.paused():
            with pytest.raises(ReplicaAckTimeout):
                await client.enqueue(t.add.using(job_id="once"), 1, 1)
            with pytest.raises(ReplicaAckTimeout):  # writes nothing, but fenced
                await client.jobs.cancel(["no-such-job"], queue="default")
        fence = ack_fence_key(QueueKeys("jobsite", "default").submitted)
        with redis.Redis(port=fresh.master.port) as r:
            assert r.exists(fence)
        acks = client.scripts.raw.acks
        assert acks is not None and (acks.timeouts, acks.covered) == (2, 0)
        # The replica back: the next call still fences, and its acknowledgement covers both.
        assert await client.jobs.cancel(["no-such-job"], queue="default") == {
            "no-such-job": "not_found"
        }
        assert (acks.timeouts, acks.covered) == (2, 2)
        assert fresh.job_on(fresh.replica, "once")["state"] == "submitted"
        with redis.Redis(port=fresh.master.port, decode_responses=True) as r:
            sets = command_calls(r, "set")
            await client.jobs.cancel(["no-such-job"], queue="default")  # covered: no fence any more
            assert command_calls(r, "set") == sets


async def test_a_completion_is_held_while_the_replica_is_paused(fresh: Pair) -> None:
    """The worker's completion was made on the master but not acknowledged: the worker keeps the
    outcome (unflushed) and writes it again until a replica acknowledges; the job ran once."""
    settings = fresh.settings()
    GATE["open"] = asyncio.Event()
    async with Client(settings) as client:
        job = await client.enqueue(gated)
        worker = Worker(settings, [gated])
        running = asyncio.create_task(worker.run())
        try:
            await until(lambda: runs == [job.id])
            with fresh.paused():
                GATE["open"].set()
                await until(lambda: fresh.job_on(fresh.master, job.id).get("state") == "completed")
                await asyncio.sleep(3 * TIMEOUT_MS / 1000)
                assert worker.flusher.unflushed == 1  # held, not dropped
            await until(lambda: worker.flusher.unflushed == 0)
            assert fresh.job_on(fresh.replica, job.id) == {"state": "completed", "result": '"done"'}
            assert runs == [job.id]
            # The rewrite found the job completed by the first write: counted as that one.
            assert (worker.counters["completed"], worker.counters["lease_lost"]) == (1, 0)
        finally:
            worker.stop()
            await asyncio.wait_for(running, 15)


async def test_a_cluster_waits_on_the_node_of_the_queue() -> None:
    """On a Redis Cluster the WAIT goes to the master that took the write (the pipeline to the
    queue's node), not to every master."""
    with ClusterServer(replicas=1, node_timeout_ms=5000) as cluster:
        marker = QueueKeys("jobsite", "default").marker
        master, replica = cluster.node_of(marker), cluster.node_of(marker, "replica")
        settings = EngineSettings.from_url(cluster.url, replica_acks=1, idle_wait_s=0.2)
        async with Client(settings) as client:
            job = await client.enqueue(t.add, 4, 4)
            with redis.Redis(port=replica.port, decode_responses=True) as r:
                r.readonly()
                assert r.exists(QueueKeys("jobsite", "default").job(job.id))
            await drain(settings, [t.add])
            assert (await client.jobs.get(job.id)).result == 8
        with SyncClient(settings) as sync:
            await asyncio.to_thread(sync.enqueue, t.add, 1, 1)
        others = [n for n in cluster.nodes if n.port not in (master.port, replica.port)]
        with redis.Redis(port=master.port, decode_responses=True) as r:
            assert command_calls(r, "wait") >= 4
        for node in others:
            with redis.Redis(port=node.port, decode_responses=True) as r:
                assert command_calls(r, "wait") == 0
