"""bench/latency_proxy.py: a real redis-server behind it answers, in order, R ms later."""

from __future__ import annotations

import time

import redis.asyncio as aredis

from bench.latency_proxy import LatencyProxy
from engine.dev.devserver import RedisServer

RTT_MS = 20.0


async def test_each_round_trip_takes_at_least_the_rtt(redis_server: RedisServer) -> None:
    proxy = await LatencyProxy(redis_server.port, RTT_MS / 2).start()
    client = aredis.Redis(port=proxy.port)
    try:
        await client.ping()  # connects (HELLO and the like) before anything is timed
        took_ms = []
        for _ in range(5):
            start = time.perf_counter()
            assert await client.ping()
            took_ms.append((time.perf_counter() - start) * 1000)
        assert min(took_ms) >= RTT_MS
        assert max(took_ms) < RTT_MS + 50
        assert proxy.up.chunks >= 6 and proxy.down.chunks >= 6
    finally:
        await client.aclose()
        await proxy.close()


async def test_a_pipeline_and_a_large_value_come_back_whole_and_in_order(
    redis_server: RedisServer,
) -> None:
    proxy = await LatencyProxy(redis_server.port, 1.0).start()
    client = aredis.Redis(port=proxy.port)
    big = bytes(range(256)) * 8192  # 2 MiB: many chunks, each delayed on its own
    try:
        async with client.pipeline(transaction=False) as pipe:
            for i in range(500):
                pipe.set(f"latency-proxy:{i}", i)
            for i in range(500):
                pipe.get(f"latency-proxy:{i}")
            replies = await pipe.execute()
        assert replies[500:] == [str(i).encode() for i in range(500)]
        await client.set("latency-proxy:big", big)
        assert await client.get("latency-proxy:big") == big
    finally:
        await client.delete("latency-proxy:big", *(f"latency-proxy:{i}" for i in range(500)))
        await client.aclose()
        await proxy.close()
