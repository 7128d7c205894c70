"""Redis Cluster: the client for `redis+cluster://` URLs and the per-slot helpers the engine needs.

Every key of a queue carries the queue name as its hash tag (`prefix:{queue}:...`, keys.py), so
one queue lives in one slot and every script and transaction stays on one node. What spans
queues (waiting for work, reading event streams) runs once per slot, concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from redis import exceptions as rx
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.crc import key_slot

from ..errors import ConfigError, RedisRefused, RedisUnavailable
from ..settings import CLUSTER_SCHEMES
from .faults import typed

__all__ = [
    "CLUSTER_SCHEMES",
    "Fanout",
    "cluster_client",
    "cluster_parts",
    "is_cluster",
    "node_time",
    "slot_groups",
]


def cluster_typed(exc: BaseException, url: str) -> BaseException:
    """Return the engine's typed error for a failure of a cluster client (see faults.typed).

    Besides what faults.typed knows: no node reachable is RedisUnavailable, a slot no master
    covers (a failover under way) is a refusal.
    """
    if isinstance(exc, rx.SlotNotCoveredError):
        error: RedisUnavailable = RedisRefused("CLUSTERDOWN", f"Redis at {url} refused: {exc}")
    elif isinstance(exc, rx.RedisClusterException) and "cannot be connected" in str(exc):
        error = RedisUnavailable(f"cannot reach Redis at {url}: {exc}")
    else:
        return typed(exc, url)
    error.__cause__ = exc
    return error


async def ready(client: RedisCluster) -> None:
    """Learn the cluster's nodes and commands before the first command (once, under a lock).

    redis-py 8.1 works out a command's slot before it initializes a fresh client: a fresh
    client given 40 commands at once failed 3 times in 8 (writes to a closed transport,
    connections closed by the server); initialized first, 0 in 8.
    """
    if client._initialize:
        await client.initialize()


class TypedClusterPipeline(ClusterPipeline):
    """A cluster pipeline whose Redis failures are the engine's typed errors."""

    shown_url = ""

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> Any:
        """Run the queued commands (grouped by node); failures as in TypedRedis."""
        try:
            await ready(self.cluster_client)
            return await super().execute(raise_on_error, allow_redirections)
        except Exception as exc:
            raise cluster_typed(exc, self.shown_url)  # noqa: B904 (keeps the cause)


class TypedRedisCluster(RedisCluster):
    """A cluster client whose Redis failures are the engine's typed errors (see TypedRedis)."""

    shown_url = ""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        """Run one command on the node of its slot, translating Redis failures."""
        try:
            await ready(self)
            return await super().execute_command(*args, **options)
        except Exception as exc:
            raise cluster_typed(exc, self.shown_url)  # noqa: B904 (keeps the cause)

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        """Return a pipeline; with `transaction`, every key it names must share one slot."""
        pipe = TypedClusterPipeline(self, bool(transaction))  # type: ignore[abstract]
        pipe.shown_url = self.shown_url
        return pipe


def cluster_parts(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """Return the start nodes of `redis+cluster://[user:pw@]h1:p1,h2:p2[/0]` and the client
    options the URL sets (credentials, TLS); the async and the sync clients read it so."""
    parts = urlsplit(url)
    userinfo, _, netloc = parts.netloc.rpartition("@")
    nodes = []
    for item in netloc.split(","):
        host, _, port = item.rpartition(":")
        nodes.append((host or "127.0.0.1", int(port or 6379)))
    db = parts.path.strip("/")
    if db not in ("", "0"):
        raise ConfigError(f"a Redis Cluster has only database 0, got /{db}")
    user, _, password = userinfo.partition(":") if ":" in userinfo else ("", "", userinfo)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    return nodes, {
        "username": unquote(user) or None,
        "password": unquote(password) or None,
        "ssl": parts.scheme == "rediss+cluster",
        "ssl_cert_reqs": query.get("ssl_cert_reqs", "required"),
        "ssl_ca_certs": query.get("ssl_ca_certs"),
    }


def cluster_client(url: str, options: dict[str, Any]) -> TypedRedisCluster:
    """Connect to `redis+cluster://[user:pw@]h1:p1,h2:p2[/0]` (rediss+cluster: TLS).

    The nodes listed are only where discovery starts; the client learns every master and
    follows MOVED and ASK redirections itself.
    """
    nodes, from_url = cluster_parts(url)
    return TypedRedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in nodes], **from_url, **options
    )


def is_cluster(redis: Any) -> bool:
    """Tell whether `redis` is a cluster client (asyncio's or the blocking one)."""
    return isinstance(redis, RedisCluster | SyncRedisCluster)


def slot_groups(keys: Sequence[str]) -> list[list[str]]:
    """Return `keys` grouped by cluster slot (order kept inside each group)."""
    groups: dict[int, list[str]] = {}
    for key in keys:
        groups.setdefault(key_slot(key.encode()), []).append(key)
    return list(groups.values())


async def node_time(redis: RedisCluster, key: str) -> Any:
    """Return TIME from the master holding `key` (the clock that key's scripts read)."""
    await redis.initialize()  # learns the slots on first use; nothing to do after
    return await redis.time(target_nodes=redis.get_node_from_key(key))


class Fanout:
    """One call per slot group in flight at once; each `next` returns what has finished.

    A call still blocked when `next` returns stays in flight for a later `next`, so nothing it
    reads is lost and no connection is dropped; `close` (or cancelling `next`) cancels them.
    """

    def __init__(
        self, groups: Sequence[Sequence[str]], call: Callable[..., Awaitable[Any]]
    ) -> None:
        self.groups = [list(g) for g in groups]
        self.call = call
        self._flying: dict[int, asyncio.Future[Any]] = {}
        self._held: list[Any] = []

    async def next(self, *args: Any, block: bool = True, **kwargs: Any) -> list[Any]:
        """Start `call(group, *args, **kwargs)` for every idle group; return finished replies.

        With `block`, wait until the first call ends; without, wait only for the calls just
        started (the caller made them non-blocking). A failure is raised after the replies
        that finished with it are set aside for the next `next`.
        """
        started = []
        for n, group in enumerate(self.groups):
            if n not in self._flying:
                self._flying[n] = asyncio.ensure_future(self.call(group, *args, **kwargs))
                started.append(self._flying[n])
        try:
            if block:
                await asyncio.wait(self._flying.values(), return_when=asyncio.FIRST_COMPLETED)
            elif started:
                await asyncio.wait(started)
        except asyncio.CancelledError:
            await self.close()
            raise
        replies, self._held = self._held, []
        error: BaseException | None = None
        for n, task in list(self._flying.items()):
            if task.done():
                del self._flying[n]
                if task.exception() is None:
                    replies.append(task.result())
                elif error is None:
                    error = task.exception()
        if error is not None:
            self._held = replies
            raise error
        return replies

    async def finish(self) -> None:
        """Wait for every call in flight to end; the next `next` returns their replies."""
        if self._flying:
            await asyncio.wait(list(self._flying.values()))

    async def close(self) -> None:
        """Cancel the calls in flight and wait for them to end."""
        flying, self._flying = list(self._flying.values()), {}
        for task in flying:
            task.cancel()
        await asyncio.gather(*flying, return_exceptions=True)


def per_slot(redis: Redis | RedisCluster, keys: Sequence[str], call: Any) -> Fanout | None:
    """Return a Fanout of `call(group, ...)` per slot group of `keys` when they span slots.

    None on a single node or when every key shares a slot: the caller then makes one call
    over all the keys, as before (no extra round trip, no task).
    """
    if not is_cluster(redis):
        return None
    groups = slot_groups(keys)
    return Fanout(groups, call) if len(groups) > 1 else None
