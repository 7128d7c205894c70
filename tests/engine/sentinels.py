"""A Sentinel deployment on loopback for failover tests: master, one replica, three sentinels."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from pathlib import Path

import redis

from engine.dev.devserver import RedisServer, free_port

SERVICE = "jobs"


class SentinelSet:
    """Start and own a master, its replica and three sentinels (quorum 2).

    The master refuses writes without a replica in sync (`min-replicas-to-write 1`,
    `min-replicas-max-lag`), as docs/reliability.md advises; the replica has no such setting,
    so that after the master's loss it takes writes alone.
    """

    def __init__(
        self, tmp: Path, *, down_after_ms: int = 1000, failover_timeout_ms: int = 4000
    ) -> None:
        self.tmp = tmp
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.master = RedisServer(
            args=(
                *("--min-replicas-to-write", "1", "--min-replicas-max-lag", "2"),
                *("--repl-diskless-sync-delay", "0"),
            )
        )
        self.replica = RedisServer()
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """Return the engine's redis+sentinel:// URL of this deployment."""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def start(self, timeout_s: float = 15.0) -> SentinelSet:
        """Start every process; return once each sentinel knows the replica and its peers."""
        self.master.start()
        self.replica.args = ("--replicaof", "127.0.0.1", str(self.master.port))
        self.replica.start()
        for port in self.sentinel_ports:
            conf = self.tmp / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.tmp}\n"
                f"logfile {self.tmp}/sentinel-{port}.log\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.master.port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}\n"
                f"sentinel failover-timeout {SERVICE} {self.failover_timeout_ms}\n"
            )
            self.sentinels.append(
                subprocess.Popen(
                    ["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL
                )
            )
        deadline = time.monotonic() + timeout_s
        while not self._writable() or not all(self._ready(p) for p in self.sentinel_ports):
            if time.monotonic() > deadline:
                raise RuntimeError(f"sentinels not ready; see {self.tmp}/sentinel-*.log")
            time.sleep(0.1)
        return self

    def _writable(self) -> bool:
        with redis.Redis(port=self.master.port) as r:
            return int(r.info("replication").get("min_slaves_good_slaves", 0)) >= 1

    def _ready(self, port: int) -> bool:
        with contextlib.suppress(redis.RedisError), redis.Redis(port=port) as s:
            state = s.sentinel_master(SERVICE)
            return bool(state["num-slaves"] == 1 and state["num-other-sentinels"] == 2)
        return False

    def failover(self) -> None:
        """Ask one sentinel for a planned failover (the old master stays up)."""
        with redis.Redis(port=self.sentinel_ports[0]) as s:
            s.execute_command("SENTINEL", "FAILOVER", SERVICE)

    def stop(self) -> None:
        """Stop every process this object started."""
        for proc in self.sentinels:
            proc.terminate()
        for proc in self.sentinels:
            proc.wait()
        self.replica.cleanup()
        self.master.cleanup()

    def __enter__(self) -> SentinelSet:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PromotionClock(threading.Thread):
    """Poll the replica's ROLE every 5 ms; `promoted_at` is when it first answered master."""

    def __init__(self, port: int) -> None:
        super().__init__(name="promotion-clock", daemon=True)
        self.port = port
        self.promoted_at: float | None = None
        self._stop = threading.Event()

    def run(self) -> None:
        with redis.Redis(port=self.port, socket_timeout=1) as r:
            while not self._stop.is_set() and self.promoted_at is None:
                with contextlib.suppress(redis.RedisError):
                    if r.execute_command("ROLE")[0] in (b"master", "master"):
                        self.promoted_at = time.time()
                time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        self.join()
