"""A loopback TCP proxy that tests drive to break connections: reset, blackhole, drop, latency,
and a request that reaches the server while its reply is lost.

Threads, not asyncio: it keeps working whatever the test's event loop is doing.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time


class FaultProxy:
    """Forward 127.0.0.1:<port> to an upstream port; break the traffic on demand."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        # While set, nothing is forwarded and new connections are held: packets vanish.
        self.blackholed = threading.Event()
        # While set, new connections are closed as soon as they are accepted (refused).
        self.refusing = threading.Event()
        # While set, every byte read is thrown away, each way; connections stay open (a network
        # that loses packets without a reset: nothing that was sent then ever arrives).
        self.dropping = threading.Event()
        # Seconds added to every chunk forwarded, each way.
        self.latency_s = 0.0
        self.resets = 0
        # cut_reply: the bytes that mark a request whose reply is lost, and how many more times.
        self._cut_marker = b""
        self._cuts_left = 0
        self.cuts = 0
        self._muted: set[tuple[socket.socket, socket.socket]] = set()
        self._pumps = 0  # threads still forwarding: a socket they wait on closes when they end
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def url(self, db: int = 0) -> str:
        """Return the redis:// URL that goes through this proxy."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def reset_all(self) -> int:
        """Reset every open connection (RST to both ends); return how many."""
        with self._lock:
            pairs = list(self._pairs)
            self._pairs.clear()
        for pair in pairs:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    sock.close()
        self.resets += len(pairs)
        return len(pairs)

    def cut_reply(self, marker: bytes, times: int = 1) -> None:
        """Lose the replies of the next `times` requests containing `marker`.

        Each such request is forwarded, so the server runs it; its connection then gets no byte
        back and is reset 0.2 s later, as when a network or a failover drops a connection
        between a command and its reply.
        """
        with self._lock:
            self._cut_marker, self._cuts_left = marker, times

    def _should_cut(self, data: bytes) -> bool:
        with self._lock:
            if self._cuts_left <= 0 or self._cut_marker not in data:
                return False
            self._cuts_left -= 1
            self.cuts += 1
            return True

    def close(self) -> None:
        """Stop accepting and reset everything; return once the server has seen the resets.

        A socket closed while a pump thread waits on it is released (and reset) only when that
        wait ends: until then the server keeps the connection, and a command queued on it (a
        worker's claim behind its BZPOPMIN) could still run for a worker that is gone.
        """
        self._closed.set()
        self.blackholed.clear()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.reset_all()
        deadline = time.monotonic() + 2.0
        while self._pumps and time.monotonic() < deadline:
            time.sleep(0.01)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        if self.refusing.is_set():
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            return
        while self.blackholed.is_set() and not self._closed.is_set():
            time.sleep(0.01)
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            client.close()
            return
        pair = (client, upstream)
        with self._lock:
            if self._closed.is_set():  # closed meanwhile: a pair added now would outlive close()
                client.close()
                upstream.close()
                return
            self._pairs.add(pair)
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True).start()

    def _pump(
        self, pair: tuple[socket.socket, socket.socket], src: socket.socket, dst: socket.socket
    ) -> None:
        with self._lock:
            self._pumps += 1
        try:
            self._forward(pair, src, dst)
        finally:
            with self._lock:
                self._pumps -= 1

    def _forward(
        self, pair: tuple[socket.socket, socket.socket], src: socket.socket, dst: socket.socket
    ) -> None:
        try:
            while True:
                if self.blackholed.is_set():
                    time.sleep(0.01)
                    continue
                ready, _, _ = select.select([src], [], [], 0.05)
                if not ready:
                    if src.fileno() < 0:
                        return
                    continue
                data = src.recv(65536)
                if not data:
                    break
                if self.latency_s:
                    time.sleep(self.latency_s)
                if pair in self._muted or self.dropping.is_set():
                    continue  # a reply being lost (cut_reply), or every byte (dropping)
                if src is pair[0] and self._should_cut(data):
                    self._muted.add(pair)
                    dst.sendall(data)
                    time.sleep(0.2)
                    break
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        with self._lock:
            self._pairs.discard(pair)
        for sock in pair:
            with contextlib.suppress(OSError):
                if pair in self._muted:  # a reset, not a close: no reply got through
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
