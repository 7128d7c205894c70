"""Script calls on connections held from the async client's pool (engine/transport/held.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from redis.asyncio import Redis

from engine import Client, EngineSettings, JobState, RedisUnavailable
from engine.dev.devserver import free_port
from engine.transport.connection import connect
from engine.transport.held import AsyncHeldConnections, held_runner

from . import tasks as t


def _held(client: Client) -> AsyncHeldConnections:
    run = client.scripts.raw.run
    if not isinstance(run, AsyncHeldConnections):
        pytest.skip("a cluster client keeps redis-py's own path")
    return run


async def _clients(redis: Redis) -> int:
    return sum(1 for c in await redis.client_list() if c["cmd"] != "client|list")


async def test_enqueues_reuse_one_connection_and_concurrent_ones_take_their_own(
    client: Client,
) -> None:
    held = _held(client)
    for i in range(20):
        await client.enqueue(t.add, i, i)
    assert len(held._idle) == 1
    before = await _clients(client.redis)
    jobs = await asyncio.gather(*(client.enqueue(t.add, i, i) for i in range(8)))
    assert len({j.id for j in jobs}) == 8
    assert 1 <= len(held._idle) <= 8  # each call had a connection of its own
    assert await _clients(client.redis) - before == len(held._idle) - 1


async def test_connections_the_server_dropped_connect_again(client: Client) -> None:
    held = _held(client)
    await asyncio.gather(*(client.enqueue(t.add, i, i) for i in range(4)))
    kept = len(held._idle)
    # A blocking client, so that this loop runs no step between the kill and the enqueues: the
    # ends wait unread in the sockets, and each held connection in turn must see its own.
    with redis.Redis.from_url(client.settings.redis_url) as killer:
        assert killer.client_kill_filter(_type="normal", skipme=True) >= kept
    time.sleep(0.05)  # the ends reach this side's sockets
    for i in range(kept + 1):
        assert (await client.enqueue(t.add, i, i)).state is JobState.SUBMITTED


async def test_an_error_reply_keeps_the_connection_and_noscript_loads_again(
    client: Client,
) -> None:
    held = _held(client)
    await client.enqueue(t.add, 1, 1)
    connection = held._idle[-1]
    await client.redis.script_flush()
    assert (await client.enqueue(t.add, 2, 2)).state is JobState.SUBMITTED  # NOSCRIPT, loaded
    with pytest.raises(Exception, match="unknown command"):
        await held.execute_command("NO-SUCH-COMMAND")
    assert held._idle == [connection]  # both error replies were read whole: kept


async def test_a_call_cancelled_before_its_reply_never_hands_that_reply_to_the_next(
    client: Client,
) -> None:
    held = _held(client)
    await held.execute_command("PING")
    waiting = asyncio.ensure_future(held.execute_command("BLPOP", "held:list", 5))
    await asyncio.sleep(0.1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert held._idle == []  # dropped, not kept with a reply owed
    await client.redis.lpush("held:list", "v")
    assert await held.execute_command("PING") in (True, "PONG")
    assert await client.redis.llen("held:list") == 1  # the cancelled BLPOP took nothing


async def test_a_dead_redis_raises_the_typed_error() -> None:
    settings = EngineSettings.from_url(f"redis://127.0.0.1:{free_port()}/0")
    async with Client(settings) as client:
        assert isinstance(client.scripts.raw.run, AsyncHeldConnections)
        with pytest.raises(RedisUnavailable, match="cannot reach"):
            await client.enqueue(t.add, 1, 1)


async def test_only_a_plain_pool_of_the_engines_client_is_held_from(
    settings: EngineSettings,
) -> None:
    engine_made = connect(settings)
    try:
        if not hasattr(engine_made, "connection_pool"):  # a cluster routes by keys
            assert held_runner(engine_made) is engine_made
            return
        assert isinstance(held_runner(engine_made), AsyncHeldConnections)
        plain = Redis.from_url(settings.redis_url)
        assert held_runner(plain) is plain  # not the engine's: its errors are not typed
        await plain.aclose()
    finally:
        await engine_made.aclose()
