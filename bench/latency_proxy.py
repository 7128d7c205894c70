"""A loopback TCP proxy that delays every chunk by a fixed time each way, in order.

    python -m bench.latency_proxy --listen-port L --target-port T --delay-ms D

`bin/bench --rtt-ms R` puts one between every system and the private redis-server with
D = R / 2, so a request and its reply together wait R ms: Redis across a network.

Why a proxy and not `tc netem`: netem on loopback, limited to the Redis port, would cost no CPU
of its own, which matters on 2 cores. But this machine's kernel has neither netem nor prio
(`tc qdisc add dev lo root netem delay 0.5ms`: "Specified qdisc kind is unknown"; only htb is
built in, and it shapes rate, not delay), and modules cannot be loaded. So a proxy, made cheap:
asyncio protocols (no streams), uvloop when installed, chunks released by one timer for all
connections, and every chunk that is due at a wake-up written in one call. A chunk is written
`delay` after it was read; since the delay is the same for every chunk, order is kept.

The timer: asyncio's (and uvloop's) own timers wake at millisecond granularity (epoll's
timeout), too coarse for 0.5 ms; a Linux timerfd (`os.timerfd_create`, Python 3.13+) watched by
the loop wakes within microseconds. Without it, `loop.call_at` is the fallback.

What it costs (2026-11-26, 2 cores shared with other work, redis-benchmark against a private
redis-server): a sequential PING's p50 goes from 15 to 39 µs through the proxy at 0 ms (so each
round trip pays about 25 µs more beyond the delay asked for), and 20 clients pipelining SETs by
10 get 314,000 SETs/s through it instead of 575,000 direct: one Python process forwards about
31,000 chunks/s each way. At 0.5 ms each way a PING's p50 is 1.17 ms (minimum 1.07 ms): never
less than the delay, and about 0.1 ms per wake-up more. `bin/bench --rtt-ms 0` runs every
system through the proxy with no delay, to compare with a run without `--rtt-ms`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import itertools
import os
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

# Pause reading one side while the other side's unsent bytes are above this.
HIGH_WATER_BYTES = 4 * 2**20


class Clock:
    """Call each scheduled pipe's `release` when its first chunk is due (monotonic ns)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[int, int, Pipe]] = []
        self._seq = itertools.count()
        self._armed_ns = 0
        self._handle: asyncio.TimerHandle | None = None
        self._fd = -1
        if hasattr(os, "timerfd_create"):
            self._fd = os.timerfd_create(time.CLOCK_MONOTONIC, flags=os.TFD_NONBLOCK)
            loop.add_reader(self._fd, self._fired)

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
        if self._handle is not None:
            self._handle.cancel()

    def schedule(self, pipe: Pipe, due_ns: int) -> None:
        heapq.heappush(self._heap, (due_ns, next(self._seq), pipe))
        if self._armed_ns == 0 or due_ns < self._armed_ns:
            self._arm(due_ns)

    def _arm(self, due_ns: int) -> None:
        self._armed_ns = due_ns
        if self._fd >= 0:
            os.timerfd_settime_ns(self._fd, flags=os.TFD_TIMER_ABSTIME, initial=due_ns)
            return
        if self._handle is not None:
            self._handle.cancel()
        delay_s = (due_ns - time.monotonic_ns()) / 1e9
        self._handle = self._loop.call_at(self._loop.time() + delay_s, self._fired)

    def _fired(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(BlockingIOError):
                os.read(self._fd, 8)
        self._armed_ns = 0
        now = time.monotonic_ns()
        while self._heap and self._heap[0][0] <= now:
            _, _, pipe = heapq.heappop(self._heap)
            pipe.release(now)
        if self._heap:
            self._arm(self._heap[0][0])


class Pipe:
    """One direction of one connection: chunks read from one side, written to the other."""

    def __init__(self, clock: Clock, delay_ns: int, stats: Stats) -> None:
        self._clock = clock
        self._delay_ns = delay_ns
        self._stats = stats
        # (due ns, chunk); None as a chunk closes the sink once everything before it is written.
        self._queue: deque[tuple[int, bytes | None]] = deque()
        self._sink: asyncio.Transport | None = None
        # Due chunks that came before the sink was connected.
        self._held: list[bytes | None] = []

    def attach(self, sink: asyncio.Transport) -> None:
        self._sink = sink
        held, self._held = self._held, []
        self._write(held)

    def push(self, chunk: bytes | None) -> None:
        if chunk is not None:
            self._stats.chunks += 1
            self._stats.bytes += len(chunk)
        if self._delay_ns == 0 and not self._queue:
            self._write([chunk])
            return
        due_ns = time.monotonic_ns() + self._delay_ns
        self._queue.append((due_ns, chunk))
        if len(self._queue) == 1:
            self._clock.schedule(self, due_ns)

    def release(self, now_ns: int) -> None:
        batch: list[bytes | None] = []
        while self._queue and self._queue[0][0] <= now_ns:
            batch.append(self._queue.popleft()[1])
        self._write(batch)
        if self._queue:
            self._clock.schedule(self, self._queue[0][0])

    def _write(self, batch: list[bytes | None]) -> None:
        sink = self._sink
        if sink is None:
            self._held.extend(batch)
            return
        if sink.is_closing():
            return
        data = [chunk for chunk in batch if chunk is not None]
        if data:
            sink.write(data[0] if len(data) == 1 else b"".join(data))
        if len(data) < len(batch):
            sink.close()


@dataclass
class Stats:
    """What went one way through the proxy."""

    chunks: int = 0
    bytes: int = 0


class Side(asyncio.Protocol):
    """One socket of a proxied connection: what it reads goes into `out`."""

    def __init__(
        self, out: Pipe, into: Pipe, on_made: Callable[[Side], None] | None = None
    ) -> None:
        self.out = out
        self._on_made = on_made
        # The pipe that writes to this socket.
        self.into = into
        self.transport: asyncio.Transport | None = None
        # The other socket: paused while this one cannot take more bytes.
        self.peer: Side | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.into.attach(self.transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport.set_write_buffer_limits(high=HIGH_WATER_BYTES)
        if self._on_made is not None:
            self._on_made(self)

    def data_received(self, data: bytes) -> None:
        self.out.push(data)

    def eof_received(self) -> bool:
        return False  # close: Redis clients do not half-close

    def connection_lost(self, exc: Exception | None) -> None:
        self.out.push(None)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class LatencyProxy:
    """Accept on 127.0.0.1:listen_port; forward to 127.0.0.1:target_port, delay_ms each way."""

    def __init__(self, target_port: int, delay_ms: float) -> None:
        self.target_port = target_port
        self.delay_ns = round(delay_ms * 1_000_000)
        # Client to server (each chunk about one request or pipeline), and back.
        self.up = Stats()
        self.down = Stats()
        self.connections = 0
        self._clock: Clock | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, listen_port: int = 0) -> LatencyProxy:
        loop = asyncio.get_running_loop()
        self._clock = Clock(loop)
        self._server = await loop.create_server(self._accepted, "127.0.0.1", listen_port)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            if hasattr(self._server, "close_clients"):  # Python 3.13+
                self._server.close_clients()
            await self._server.wait_closed()
        if self._clock is not None:
            self._clock.close()

    def _accepted(self) -> Side:
        assert self._clock is not None
        self.connections += 1
        up = Pipe(self._clock, self.delay_ns, self.up)
        down = Pipe(self._clock, self.delay_ns, self.down)
        return Side(up, down, lambda client: self._made(client, up, down))

    def _made(self, client: Side, up: Pipe, down: Pipe) -> None:
        task = asyncio.get_running_loop().create_task(self._connect(client, up, down))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, client: Side, up: Pipe, down: Pipe) -> None:
        assert client.transport is not None
        loop = asyncio.get_running_loop()
        try:
            _, server = await loop.create_connection(
                lambda: Side(down, up), "127.0.0.1", self.target_port
            )
        except OSError:
            client.transport.close()
            return
        server.peer, client.peer = client, server
        if client.transport.is_closing():
            assert server.transport is not None
            server.transport.close()


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


async def serve(listen_port: int, target_port: int, delay_ms: float) -> None:
    proxy = await LatencyProxy(target_port, delay_ms).start(listen_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"latency_proxy listening port={proxy.port} delay_ms={delay_ms}", flush=True)
    await stop.wait()
    await proxy.close()
    print(
        f"latency_proxy stopped connections={proxy.connections} up_chunks={proxy.up.chunks}"
        f" up_bytes={proxy.up.bytes} down_chunks={proxy.down.chunks}"
        f" down_bytes={proxy.down.bytes}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.latency_proxy")
    parser.add_argument("--listen-port", type=int, default=0)
    parser.add_argument("--target-port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True, help="added each way")
    args = parser.parse_args(argv)
    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(serve(args.listen_port, args.target_port, args.delay_ms))
    sys.exit(0)


if __name__ == "__main__":
    main()
