"""The floor under a call made one at a time: what each layer of an enqueue costs on this machine.

    .venv/bin/python -m bench.floor [--calls 5000] [--runs 3] [--no-docs]

On a private redis-server, N sequential calls per layer, best of `--runs`, from the kernel up:

- PING over a blocking socket (the loopback round trip alone);
- PING over a bare asyncio protocol fed to hiredis, on asyncio's loop and on uvloop (what an
  event loop adds);
- PING and EVALSHA of `return 1` through redis-py's asyncio client (what the client library
  adds);
- the engine's submit script for one prebuilt job through the typed seam (what the script adds);
- Client.enqueue of the benchmark's no-op task (the whole path: argument check, job spec, script).

The rate a layer allows is 1e6 / µs: no sequential caller can enqueue faster than the layer
under it. `bin/bench` measures "enqueue one at a time" through the last row, on asyncio's loop.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import time
from collections.abc import Awaitable, Callable

import hiredis
import redis.asyncio as aredis
import uvloop

from bench.report import publish
from engine.dev.devserver import RedisServer

PING = hiredis.pack_command(("PING",))
TARGET_PER_S = 8_000


def _best_us(calls: int, runs: int, once: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            once()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


async def _abest_us(calls: int, runs: int, once: Callable[[], Awaitable[object]]) -> float:
    await once()  # opens the connection, loads what is loaded once
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            await once()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def blocking_ping_us(port: int, calls: int, runs: int) -> float:
    """Time PING over a plain blocking socket, replies parsed by hiredis."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = hiredis.Reader()

        def once() -> object:
            sock.sendall(PING)
            reply = reader.gets()
            while reply is False:
                reader.feed(sock.recv(65536))
                reply = reader.gets()
            return reply

        return _best_us(calls, runs, once)


class _Replies(asyncio.Protocol):
    """Feed what arrives to hiredis; resolve the waiting future with each reply."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.waiting: asyncio.Future[object] | None = None

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        reply = self.reader.gets()
        if reply is not False and self.waiting is not None:
            self.waiting.set_result(reply)


async def protocol_ping_us(port: int, calls: int, runs: int) -> float:
    """Time PING over a bare asyncio protocol on the running loop."""
    loop = asyncio.get_running_loop()
    transport, replies = await loop.create_connection(_Replies, "127.0.0.1", port)
    transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def once() -> object:
        replies.waiting = loop.create_future()
        transport.write(PING)
        return await replies.waiting

    try:
        return await _abest_us(calls, runs, once)
    finally:
        transport.close()


async def client_layers_us(url: str, calls: int, runs: int) -> dict[str, float]:
    """Time redis-py's PING and EVALSHA, the submit script alone, and Client.enqueue."""
    from bench.peers.jobsite_tasks import noop
    from engine import Client, EngineSettings
    from engine.producing.submit import job_spec, submit

    out: dict[str, float] = {}
    plain = aredis.Redis.from_url(url)
    client = Client(EngineSettings.from_url(url))
    try:
        out["redis-py PING"] = await _abest_us(calls, runs, plain.ping)
        sha = await plain.script_load("return 1")
        out["redis-py EVALSHA of `return 1`"] = await _abest_us(
            calls, runs, lambda: plain.evalsha(sha, 0)
        )
        keys, limit = client.keys("default"), client.settings.max_payload_bytes
        specs = iter([job_spec(noop.call(0.0), keys, limit) for _ in range(calls * runs + 1)])
        await client.redis.config_resetstat()
        out["engine submit script, one prebuilt job"] = await _abest_us(
            calls, runs, lambda: submit(client.scripts, client.settings, keys, [next(specs)])
        )
        stats = await client.redis.info("commandstats")
        out["(of which at the server)"] = stats["cmdstat_evalsha"]["usec_per_call"]
        out["Client.enqueue (the whole path)"] = await _abest_us(
            calls, runs, lambda: client.enqueue(noop, 0.0)
        )
    finally:
        await plain.aclose()
        await client.aclose()
    return out


def measure(url: str, port: int, calls: int, runs: int) -> dict[str, float]:
    """Return µs per sequential call of every layer, from the kernel up."""
    out = {"blocking socket PING": blocking_ping_us(port, calls, runs)}
    out["asyncio protocol PING"] = asyncio.run(protocol_ping_us(port, calls, runs))
    out["uvloop protocol PING"] = uvloop.run(protocol_ping_us(port, calls, runs))
    out.update(asyncio.run(client_layers_us(url, calls, runs)))
    return out


def report(layers: dict[str, float], calls: int, runs: int) -> str:
    """Return the markdown section: each layer, the rate it allows and the target's budget."""
    budget_us = 1e6 / TARGET_PER_S
    lines = [
        "## The floor under an enqueue made one at a time",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M')} by `python -m bench.floor --calls {calls}"
        f" --runs {runs}`: sequential calls on a private redis-server, best of the runs.",
        "",
        "| layer | µs a call | calls/s it allows |",
        "|---|---:|---:|",
    ]
    for name, us in layers.items():
        allowed = "" if name.startswith("(") else f"{1e6 / us:,.0f}"
        lines.append(f"| {name} | {us:.1f} | {allowed} |")
    server_us = layers["(of which at the server)"]
    bare_us = layers["blocking socket PING"] + server_us
    redis_py_us = layers["redis-py EVALSHA of `return 1`"] + server_us
    lines += [
        "",
        f"A target of {TARGET_PER_S:,} enqueues a second leaves {budget_us:.0f} µs a call. The"
        f" loopback round trip and the submit script's time at the server alone take"
        f" {bare_us:.0f} µs ({1e6 / bare_us:,.0f}/s, with no Python at all); through redis-py's"
        f" asyncio client they take {redis_py_us:.0f} µs ({1e6 / redis_py_us:,.0f}/s) before the"
        " engine builds the job.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__)
    parser.add_argument("--calls", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    args = parser.parse_args(argv)
    with RedisServer() as server:
        layers = measure(server.url, server.port, args.calls, args.runs)
    body = report(layers, args.calls, args.runs)
    publish("floor", body, docs=not args.no_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
