"""A private 3-master Redis Cluster on loopback, for tests and trials (redis-server + redis-cli)."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time

import redis

from .devserver import RedisServer

# A cluster node also listens on its port + 10000 (the cluster bus): stay below 55536.
_PORTS = range(20_000, 55_000)


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port() -> int:
    """Return a port that is free on 127.0.0.1 with its cluster bus port (port + 10000)."""
    while True:
        port = random.choice(_PORTS)
        if _free(port) and _free(port + 10_000):
            return port


class ClusterServer:
    """Start and stop `masters` cluster-enabled redis-servers joined into one cluster, each
    master with `replicas` replicas; a node unreachable for `node_timeout_ms` counts as failed
    (a replica of a failed master then takes over)."""

    def __init__(self, masters: int = 3, replicas: int = 0, node_timeout_ms: int = 5000) -> None:
        if shutil.which("redis-cli") is None:
            raise RuntimeError("redis-cli not found: install Redis 7 (apt-get install redis-tools)")
        args = ("--cluster-enabled", "yes", "--cluster-node-timeout", str(node_timeout_ms))
        self.replicas = replicas
        self.nodes = [RedisServer(args=args) for _ in range(masters * (1 + replicas))]
        for node in self.nodes:
            node.port = free_cluster_port()

    @property
    def ports(self) -> list[int]:
        """Return the port of every node."""
        return [node.port for node in self.nodes]

    @property
    def url(self) -> str:
        """Return the redis+cluster:// URL naming every node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def start(self, timeout_s: float = 30.0) -> ClusterServer:
        """Start the nodes, assign the slots, and wait until every node says cluster_state:ok
        and every replica is in sync with its master."""
        for node in self.nodes:
            node.args = (*node.args, "--cluster-config-file", str(node.dir / "nodes.conf"))
            node.start()
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in self.ports),
                *("--cluster-replicas", str(self.replicas), "--cluster-yes"),
            ],
            check=True,
            capture_output=True,
            timeout=timeout_s,
        )
        deadline = time.monotonic() + timeout_s
        for port in self.ports:
            with redis.Redis(port=port, decode_responses=True) as r:
                while r.cluster("info")["cluster_state"] != "ok":
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the cluster on {self.ports} did not become ok")
                    time.sleep(0.05)
        for port in self.ports if self.replicas else ():
            with redis.Redis(port=port, decode_responses=True) as r:
                while not self._replicated(r):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the replicas were not in sync on {port}")
                    time.sleep(0.05)
        return self

    def _replicated(self, r: redis.Redis) -> bool:
        """Tell whether the node of `r` knows every slot's replicas and, being a replica
        itself, is in sync with its master."""
        if any(len(nodes) != 1 + self.replicas for _, _, *nodes in r.cluster("slots")):
            return False
        info = r.info("replication")
        return bool(info["role"] == "master" or info.get("master_link_status") == "up")

    def flushall(self) -> None:
        """Empty every master (replicas follow theirs)."""
        for port in self.ports:
            with redis.Redis(port=port) as r:
                if r.execute_command("ROLE")[0] in (b"master", "master"):
                    r.flushall()

    def node_of(self, key: str, role: str = "master") -> RedisServer:
        """Return the node serving `key`'s slot as `role` ("master", or "replica": its first)."""
        with redis.Redis(port=self.ports[0], decode_responses=True) as r:
            slot = int(r.cluster("keyslot", key))
            for start, end, *nodes in r.cluster("slots"):
                if start <= slot <= end:
                    port = int(nodes[0 if role == "master" else 1][1])
                    return next(n for n in self.nodes if n.port == port)
        raise LookupError(f"no node serves slot {slot}")

    def cleanup(self) -> None:
        """Stop every node and remove its data dir."""
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> ClusterServer:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
