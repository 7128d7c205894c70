"""Service calls from sync code run on the process's engine loop: pooled connections, the
caller's context, a new loop after fork, and a connection that was reset is replaced."""

from __future__ import annotations

import contextvars
import multiprocessing
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.test import override_settings

from engine import Client, EngineSettings
from engine.dev.devserver import RedisServer
from jobsite.jobs import conf, services
from tests.engine import tasks as t
from tests.faultproxy import FaultProxy

pytestmark = pytest.mark.django_db(transaction=True)

CALLER = contextvars.ContextVar("caller", default="unset")


def connections_received(server: RedisServer) -> int:
    with redis.Redis(port=server.port) as r:
        return int(r.info("stats")["total_connections_received"])


def queued(server: RedisServer) -> int:
    """Count the jobs waiting in the default queue, read straight from Redis (the ledger)."""
    with redis.Redis(port=server.port) as r:
        return int(r.zcard("jobsite:{default}:submitted"))


def test_sync_calls_share_pooled_connections(
    engine: EngineSettings, redis_server: RedisServer
) -> None:
    first = services.enqueue(t.add, 0, 0)  # opens the sync client's connection
    services.run_engine(lambda c: c.jobs.get(first.id))  # opens the loop's connection
    before = connections_received(redis_server)
    jobs = [services.enqueue(t.add, i, i) for i in range(50)]
    assert {services.run_engine(lambda c, job=job: c.jobs.get(job.id)).id for job in jobs[:10]} == {
        job.id for job in jobs[:10]
    }
    # One connection per call before (async_to_sync made a loop and a client each time).
    assert connections_received(redis_server) - before <= 1
    assert queued(redis_server) == 51


def test_the_queue_is_registered_again_after_redis_lost_it(
    engine: EngineSettings, redis_server: RedisServer
) -> None:
    services.enqueue(t.add, 1, 1)
    assert services.known_queues() == ["default"]
    with redis.Redis(port=redis_server.port) as r:
        r.flushall()  # as a restart without persistence would
    services.enqueue(t.add, 2, 2)  # the same long-lived client
    assert services.known_queues() == ["default"]


def test_the_call_sees_the_callers_context_variables(engine: EngineSettings) -> None:
    async def read(client: Client) -> str:
        return CALLER.get()

    token = CALLER.set("the view")
    try:
        assert services.run_engine(read) == "the view"
    finally:
        CALLER.reset(token)
    assert services.run_engine(read) == "unset"


@pytest.fixture
def proxied(engine: EngineSettings, redis_server: RedisServer) -> Iterator[FaultProxy]:
    """Point JOBSITE at the private Redis through a fault proxy."""
    proxy = FaultProxy(redis_server.port)
    values = {**conf.values(), "REDIS_URL": proxy.url()}
    with override_settings(JOBSITE=values):
        conf.engine_settings.cache_clear()
        yield proxy
    conf.engine_settings.cache_clear()
    proxy.close()


def test_a_reset_pooled_connection_is_replaced_before_the_next_call(
    proxied: FaultProxy, redis_server: RedisServer
) -> None:
    services.enqueue(t.add, 0, 0)
    assert proxied.reset_all() >= 1
    time.sleep(0.1)  # the reset reaches the idle loop
    for i in range(20):
        services.enqueue(t.add, i, i)
    assert queued(redis_server) == 21


def _enqueue_in_child(done: Any) -> None:
    try:
        done.put(services.enqueue(t.add, 7, 7).id)
    except Exception as exc:  # report it to the parent, which fails the test
        done.put(f"failed: {exc!r}")


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_enqueues_on_a_loop_of_its_own(
    engine: EngineSettings, redis_server: RedisServer
) -> None:
    services.enqueue(t.add, 0, 0)  # the parent's loop runs when the child is forked
    fork = multiprocessing.get_context("fork")
    done = fork.SimpleQueue()
    child = fork.Process(target=_enqueue_in_child, args=(done,))
    child.start()
    child.join(10)
    assert child.exitcode == 0
    job_id = done.get()
    assert services.run_engine(lambda c: c.jobs.get(job_id)).args == [7, 7]
    assert queued(redis_server) == 2
    services.enqueue(t.add, 1, 1)  # the parent's loop still serves it
    assert queued(redis_server) == 3


@pytest.fixture
def no_new_loops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Count event loops made and engine loops started (a sync enqueue must make neither)."""
    import asyncio

    import uvloop

    from jobsite.jobs.services import engineloop

    made: list[str] = []

    def counted(name: str, real: Any) -> Any:
        def make(*args: Any, **kwargs: Any) -> Any:
            made.append(name)
            return real(*args, **kwargs)

        return make

    monkeypatch.setattr(asyncio, "new_event_loop", counted("asyncio", asyncio.new_event_loop))
    monkeypatch.setattr(uvloop, "new_event_loop", counted("uvloop", uvloop.new_event_loop))
    monkeypatch.setattr(engineloop, "_current", None)  # restored after: the test starts none
    monkeypatch.setattr(engineloop, "EngineLoop", counted("engine loop", engineloop.EngineLoop))
    yield made


def test_a_sync_enqueue_runs_on_the_callers_thread_without_a_loop(
    engine: EngineSettings, redis_server: RedisServer, no_new_loops: list[str]
) -> None:
    """services.enqueue and a django.tasks task's enqueue(), from 8 threads at once: no event
    loop is made, the engine loop is not started, Redis is talked to on each caller's thread."""
    from engine import SyncClient
    from tests.jobsite import dj_tasks

    where: list[tuple[str, int]] = []
    real_run = SyncClient._run

    def run(self: SyncClient, step: Any) -> Any:
        where.append((threading.current_thread().name, threading.get_ident()))
        return real_run(self, step)

    def caller(n: int) -> None:
        for i in range(5):
            services.enqueue(t.add, n, i)
            dj_tasks.add.enqueue(n, i)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SyncClient, "_run", run)
        threads = [threading.Thread(target=caller, args=(n,), name=f"view-{n}") for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert queued(redis_server) == 80
    assert no_new_loops == []
    assert {name for name, _ in where} == {f"view-{n}" for n in range(8)}
    idents = {thread.name: thread.ident for thread in threads}
    assert all(idents[name] == ident for name, ident in where)
