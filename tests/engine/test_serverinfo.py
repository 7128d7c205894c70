"""engine.server_info: Redis memory, its limit and uptime, on one server and on a cluster."""

from __future__ import annotations

from engine import Client, server_info


async def test_server_info_reads_memory_limit_and_uptime(client: Client) -> None:
    info = await server_info(client.redis)
    assert info.used_memory_bytes > 0 and info.used_memory_human[-1] in "BKMG"
    assert info.uptime_s >= 0 and info.version and info.nodes >= 1
    if info.nodes == 1:  # one server: set a limit and read it back
        await client.redis.config_set("maxmemory", str(64 << 20))
        try:
            limited = await server_info(client.redis)
        finally:
            await client.redis.config_set("maxmemory", "0")
        assert limited.max_memory_bytes == 64 << 20 and limited.max_memory_human == "64.00M"
    else:
        assert info.max_memory_human == "no limit"
