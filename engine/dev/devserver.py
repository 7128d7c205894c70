"""A private redis-server on a free loopback port, for tests, the demo and benchmarks."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    """Return a TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """Start and stop one redis-server process that this object owns by pid."""

    def __init__(self, *, appendonly: bool = False, args: tuple[str, ...] = ()) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError(
                "redis-server not found: install Redis 7 (apt-get install redis-server)"
            )
        self.port = free_port()
        self.appendonly = appendonly
        self.args = args
        self.dir = Path(tempfile.mkdtemp(prefix="jobsite-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Return the redis:// URL of this server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start the server (again, keeping its data dir) and wait until it answers PING."""
        cmd = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "everysec",
            "--dir",
            str(self.dir),
            "--daemonize",
            "no",
            "--logfile",
            str(self.dir / "redis.log"),
            *self.args,
        ]
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        try:
            while True:
                try:
                    if client.ping():
                        return self
                except (redis.AuthenticationError, redis.ResponseError):
                    return self  # it answers; it wants a password
                except (redis.ConnectionError, redis.BusyLoadingError):
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"redis-server did not start; see {self.dir}/redis.log"
                        ) from None
                    time.sleep(0.02)
        finally:
            client.close()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server with `sig` (SIGKILL simulates a crash) and reap it."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def cleanup(self) -> None:
        """Stop the server and remove its data dir."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def start_replica(master: RedisServer, timeout_s: float = 15.0) -> RedisServer:
    """Start a replica of `master`; return it once `master` has it online and in sync.

    Give the master `--repl-diskless-sync-delay 0`: Redis otherwise waits 5 s for more replicas
    before the first sync.
    """
    replica = RedisServer(args=("--replicaof", "127.0.0.1", str(master.port))).start()
    deadline = time.monotonic() + timeout_s
    with redis.Redis(port=master.port, decode_responses=True) as r:
        while (r.info("replication").get("slave0") or {}).get("state") != "online":
            if time.monotonic() > deadline:
                replica.cleanup()
                raise RuntimeError(f"the replica did not sync; see {replica.dir}/redis.log")
            time.sleep(0.02)
    return replica
