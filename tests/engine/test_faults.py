"""What an exception means: the one classifier every loop and the client use."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from redis import exceptions as rx

from engine import RedisRefused, RedisUnavailable
from engine.transport.faults import Fault, classify, typed


def raised(fn: object, *args: object) -> BaseException:
    try:
        fn(*args)  # type: ignore[operator]
    except BaseException as exc:
        return exc
    raise AssertionError("did not raise")


async def test_a_write_on_a_closed_transport_means_the_connection_is_gone() -> None:
    # asyncio raises AttributeError from its own code when the transport under a stream is gone
    # (seen in the field as "'NoneType' object has no attribute ...").
    loop = asyncio.get_running_loop()
    writer = asyncio.StreamWriter(None, None, None, loop)  # type: ignore[arg-type]
    exc = raised(writer.write, b"PING\r\n")
    writer._transport = SimpleNamespace(is_closing=lambda: True)  # type: ignore[assignment]
    assert isinstance(exc, AttributeError)
    assert classify(exc) is Fault.GONE
    assert isinstance(typed(exc, "redis://h"), RedisUnavailable)


def test_the_same_error_from_our_own_code_is_a_bug() -> None:
    exc = raised(lambda: None.missing)  # type: ignore[func-returns-value]
    assert classify(exc) is Fault.BUG
    assert typed(exc, "redis://h") is exc


@pytest.mark.parametrize(
    ("exc", "fault"),
    [
        (rx.ConnectionError("Error 104 while writing to socket"), Fault.GONE),
        (rx.TimeoutError("Timeout reading from socket"), Fault.GONE),
        (ConnectionResetError(104, "reset"), Fault.GONE),
        (asyncio.IncompleteReadError(b"", 10), Fault.GONE),
        (
            rx.OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'."),
            Fault.REFUSED,
        ),
        (rx.BusyLoadingError("Redis is loading the dataset in memory"), Fault.REFUSED),
        (rx.ReadOnlyError("You can't write against a read only replica."), Fault.REFUSED),
        (rx.ResponseError("BUSY Redis is busy running a script."), Fault.REFUSED),
        (rx.ResponseError("MASTERDOWN Link with MASTER is down"), Fault.REFUSED),
        (rx.ResponseError("TRYAGAIN Multiple keys request during rehashing"), Fault.REFUSED),
        (rx.ResponseError("CLUSTERDOWN The cluster is down"), Fault.REFUSED),
        (rx.NoScriptError("No matching script."), Fault.REFUSED),
        (rx.ResponseError("ERR unknown command 'FOO'"), Fault.BUG),
        (rx.ResponseError("WRONGTYPE Operation against a key holding the wrong kind"), Fault.BUG),
        (KeyError("state"), Fault.BUG),
    ],
)
def test_classify(exc: BaseException, fault: Fault) -> None:
    assert classify(exc) is fault


def test_a_refusal_is_typed_with_its_reason_and_keeps_its_cause() -> None:
    oom = rx.OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'.")
    error = typed(oom, "redis://h:6379/0")
    assert isinstance(error, RedisRefused) and isinstance(error, RedisUnavailable)
    assert error.reason == "OOM" and error.__cause__ is oom


async def test_a_refusal_inside_a_pipeline_is_typed_too() -> None:
    """NOREPLICAS (a master without its replica) in a pipeline is a refusal, not a bug."""
    from engine import EngineSettings
    from engine.dev.devserver import RedisServer
    from engine.transport.connection import connect

    with RedisServer(args=("--min-replicas-to-write", "1")) as server:
        client = connect(EngineSettings.from_url(server.url))
        try:
            with pytest.raises(RedisRefused) as refused:
                async with client.pipeline(transaction=False) as pipe:
                    pipe.get("k")
                    pipe.set("k", "v")
                    await pipe.execute()
            assert refused.value.reason == "NOREPLICAS"
            with pytest.raises(RedisRefused, match="NOREPLICAS"):
                await client.set("k", "v")
        finally:
            await client.aclose()


def test_the_callers_own_transient_errors_are_retried_not_fatal() -> None:
    class DatabaseGone(Exception):
        pass

    assert classify(DatabaseGone()) is Fault.BUG
    assert classify(DatabaseGone(), transient=(DatabaseGone,)) is Fault.REFUSED


async def test_a_child_that_cannot_load_the_tasks_is_not_blamed_on_the_job() -> None:
    from engine import Job
    from engine.running.isolate import Isolation, IsolationUnavailable, Lanes

    lanes = Lanes(Isolation("no_such_module.load"), "host:1:abc", 1 << 20, 1)

    async def progress(pct: float, message: str) -> None:
        pass

    job = Job(id="j1", task="add", args=[1, 2], attempt=1, stalls=1)
    with pytest.raises(IsolationUnavailable, match="while loading the tasks"):
        await lanes.run(job, None, lambda: None, progress)
    await lanes.close()


async def test_a_master_move_cuts_every_backoff_short() -> None:
    """After a failover (wake_all), a loop deep in backoff tries Redis again within 0.1 s."""
    import time

    from engine.transport.reconnect import Reconnect, wake_all

    retry = Reconnect("test", cap_s=5.0)
    retry.failures = 8  # the next sleep is 2.5 to 5 s
    sleeping = asyncio.create_task(retry.failed(ConnectionError("gone")))
    await asyncio.sleep(0.2)
    assert not sleeping.done()
    start = time.monotonic()
    wake_all()
    await sleeping
    assert time.monotonic() - start < 0.15
    # The next failure, after the move, backs off as a first one (0.05 to 0.1 s), not 5 s.
    start = time.monotonic()
    await retry.failed(ConnectionError("gone"))
    assert time.monotonic() - start < 0.15 and retry.failures == 1
