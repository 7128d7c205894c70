"""Redis clients from EngineSettings: redis://, rediss:// (TLS), unix://, Sentinel, Cluster."""

from __future__ import annotations

import asyncio
import select
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis
import redis
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode as SyncClusterNode
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.driver_info import DriverInfo
from redis.retry import Retry as SyncRetry
from redis.sentinel import Sentinel as SyncSentinel

from ..errors import ConfigError
from ..settings import EngineSettings
from .cluster import CLUSTER_SCHEMES, cluster_client, cluster_parts, is_cluster, node_time
from .failover import WatchedPool
from .faults import typed

SENTINEL_SCHEME = "redis+sentinel"
# What every connection names itself with (CLIENT SETINFO), worked out once: by default redis-py
# reads its own package metadata again for every client it makes.
DRIVER = DriverInfo()


class TypedPipeline(Pipeline):
    """A pipeline whose Redis failures are the engine's typed errors."""

    # The Redis URL with its secrets hidden, for error messages.
    shown_url = ""

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Run the queued commands; a dead socket or a refusal raises RedisUnavailable."""
        try:
            return await super().execute(raise_on_error)
        except Exception as exc:
            raise typed(exc, self.shown_url)  # noqa: B904 (typed() keeps the cause)


class TypedRedis(Redis):
    """A client whose Redis failures are the engine's typed errors, never transport errors.

    RedisUnavailable when the connection is gone (redis-py has dropped it by then),
    RedisRefused (a RedisUnavailable) when Redis refuses for now (OOM, LOADING, READONLY...).
    """

    shown_url = ""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        """Run one command, translating Redis failures (see class doc)."""
        try:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except Exception as exc:
            raise typed(exc, self.shown_url)  # noqa: B904 (typed() keeps the cause)

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        """Return a pipeline that translates failures like this client."""
        pipe = TypedPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.shown_url = self.shown_url
        return pipe


_MADE: dict[type[AbstractConnection], type[AbstractConnection]] = {}


class _EngineConnection:
    """What the engine adds to redis-py's connections (see `engine_connection`)."""

    _writer: asyncio.StreamWriter | None
    _reader: asyncio.StreamReader | None

    def pack_command(self, *args: Any) -> list[bytes]:
        """Pack with hiredis's C packer (redis-py's asyncio connections pack in Python).

        A script call carries a dozen keys and its arguments, a completion 400 and more. They go
        to hiredis in one call; redis-py's hiredis packer first copies them one by one (to turn
        bytearrays into bytes), which costs more than the packing itself. A command
        name of two words ("SCRIPT LOAD") and whatever the C packer refuses go to redis-py's
        packer, which splits the name and raises its own errors.
        """
        name = args[0]
        if not (" " in name if isinstance(name, str) else b" " in name):
            try:
                return [hiredis.pack_command(args)]
            except Exception:
                pass
        return super().pack_command(*args)  # type: ignore[misc,no-any-return]

    async def send_now(self, data: bytes) -> None:
        """Write one packed command, connecting first if the socket is gone or closed; wait for
        the socket to drain (within the socket timeout) only when it did not take it all.

        redis-py's `send_packed_command` waits for the drain under `asyncio.wait_for` on every
        command, which costs more than the write on loopback.
        """
        if self._peer_gone() or self._readable():
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
        if not self.is_connected:  # type: ignore[attr-defined]
            await self.connect()  # type: ignore[attr-defined]
        writer = self._writer
        assert writer is not None
        writer.write(data)
        if writer.transport.get_write_buffer_size():
            async with asyncio.timeout(self.socket_timeout):  # type: ignore[attr-defined]
                await writer.drain()

    async def can_read(self) -> bool:
        """Also call a pooled connection whose socket was reset unfit, so the pool replaces it.

        A reset (RST) leaves the stream with an error, not at its end, and redis-py's check at
        checkout passed it: the next command then failed on the closed transport.
        """
        if self._peer_gone():
            raise OSError("the connection was closed by its peer or the network")
        return await super().can_read()  # type: ignore[misc,no-any-return]

    def should_reconnect(self) -> bool:
        """Also reconnect before the next command when the peer closed or reset the socket.

        redis-py's cluster nodes (and single-connection clients) check nothing else when they
        take a connection: without this, a connection a node closed (CLIENT KILL, timeout) or
        the network reset while it sat idle failed the next command.
        """
        return bool(super().should_reconnect()) or self._peer_gone()  # type: ignore[misc]

    def _readable(self) -> bool:
        """Tell whether the idle socket has bytes or an end waiting that the loop has not read
        yet (a peer that just closed it, a reply never read): one poll, as redis-py's checkout
        does with a read. A connection kept idle has nothing to read."""
        writer = self._writer
        sock = writer.transport.get_extra_info("socket") if writer is not None else None
        if sock is None:
            return False
        poll = select.poll()
        poll.register(sock.fileno(), select.POLLIN)
        return bool(poll.poll(0))

    def _peer_gone(self) -> bool:
        """Tell, without I/O, whether the socket was reset (RST) or closed by the peer (EOF)."""
        writer, reader = self._writer, self._reader
        if writer is None:
            return False
        return writer.transport.is_closing() or (reader is not None and reader.at_eof())


def engine_connection(cls: type[AbstractConnection]) -> type[AbstractConnection]:
    """Return `cls` with the engine's additions (one subclass per class, made once)."""
    made = _MADE.get(cls)
    if made is None:
        made = _MADE[cls] = type(f"Engine{cls.__name__}", (_EngineConnection, cls), {})
    return made


def connect(
    settings: EngineSettings, *, block_s: float = 0.0, timeout_s: float | None = None
) -> Redis:
    """Return a client; `timeout_s` bounds every command, plus `block_s` on a client for
    blocking reads (BZPOPMIN, XREADGROUP BLOCK) of at most `block_s`.

    Even a blocking read gives up: a network that loses the reply without a reset would leave
    it waiting for ever. It then fails with RedisUnavailable and its loop reconnects.

    Replies are decoded as UTF-8 with surrogateescape, so bytes that are not UTF-8 survive a
    round trip and fail JSON decoding (a clear error) instead of breaking the connection.
    """
    # With replica_acks, a script call's reply may wait for replicas that long on top.
    wait_s = block_s + settings.replica.wait_s
    options: dict[str, Any] = {
        "decode_responses": True,
        "encoding_errors": "surrogateescape",
        "socket_connect_timeout": settings.connect_timeout_s,
        "socket_timeout": (timeout_s or settings.socket_timeout_s) + wait_s,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 0 if block_s else 30,
        "driver_info": DRIVER,
    }
    scheme = urlsplit(settings.redis_url).scheme
    if scheme == SENTINEL_SCHEME:
        client = _sentinel_master(settings.redis_url, options)
    elif scheme in CLUSTER_SCHEMES:
        client = cluster_client(settings.redis_url, options)  # type: ignore[assignment]
    else:
        client = TypedRedis.from_url(settings.redis_url, **options)  # type: ignore[assignment]
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        pool.connection_class = engine_connection(pool.connection_class)
    else:  # a cluster client: a pool per node, each made (at discovery) from these
        made = client.nodes_manager.connection_kwargs  # type: ignore[attr-defined]
        made["connection_class"] = engine_connection(made["connection_class"])
    client.shown_url = settings.redacted_url
    return client


def sentinel_parts(url: str) -> tuple[list[tuple[str, int]], str, dict[str, Any], str | None]:
    """Return the sentinels, the service, the master's options (db, password) and the
    sentinels' password of `redis+sentinel://[:pw@]h1:p1,h2:p2/service[/db]`."""
    parts = urlsplit(url)
    hosts = []
    for item in parts.netloc.rpartition("@")[2].split(","):
        host, _, port = item.rpartition(":")
        hosts.append((host or "127.0.0.1", int(port or 26379)))
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ConfigError(
            "a Sentinel URL needs the service name: redis+sentinel://host:port/mymaster"
        )
    db = int(path[1]) if len(path) > 1 else 0
    password = unquote(parts.password) if parts.password else None
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    return hosts, path[0], {"db": db, "password": password}, query.get("sentinel_password")


def _sentinel_kwargs(options: dict[str, Any], password: str | None) -> dict[str, Any]:
    # Sentinels are asked on connection checkouts (see failover.py): never wait long for one.
    kwargs: dict[str, Any] = {
        "socket_timeout": options["socket_connect_timeout"],
        "socket_connect_timeout": options["socket_connect_timeout"],
    }
    if password is not None:
        kwargs["password"] = password
    return kwargs


def _sentinel_master(url: str, options: dict[str, Any]) -> TypedRedis:
    """Connect to the master named in `redis+sentinel://[:pw@]h1:p1,h2:p2/service[/db]`.

    The client follows a new master within a second of a failover (engine/transport/failover.py).
    """
    hosts, service, master_options, sentinel_password = sentinel_parts(url)
    sentinel = Sentinel(hosts, sentinel_kwargs=_sentinel_kwargs(options, sentinel_password))  # type: ignore[no-untyped-call]
    master: TypedRedis = sentinel.master_for(
        service,
        redis_class=TypedRedis,
        connection_pool_class=WatchedPool,
        **master_options,
        **options,
    )
    return master


def connect_sync(settings: EngineSettings, *, timeout_s: float | None = None) -> Any:
    """Return a synchronous client (redis-py's, thread-safe pool) for the same URLs as
    `connect`: redis://, rediss://, unix://, Sentinel, Cluster. Failures are not translated
    here: the caller passes them through `faults.typed` (SyncClient does).

    A Sentinel client asks the sentinels for the master on each new connection and drops a
    connection the master refuses as READONLY (redis-py's own handling).
    """
    options: dict[str, Any] = {
        "decode_responses": True,
        "encoding_errors": "surrogateescape",
        "socket_connect_timeout": settings.connect_timeout_s,
        "socket_timeout": (timeout_s or settings.socket_timeout_s) + settings.replica.wait_s,
        "health_check_interval": 30,
        "driver_info": DRIVER,
    }
    url = settings.redis_url
    scheme = urlsplit(url).scheme
    if scheme == SENTINEL_SCHEME:
        hosts, service, master_options, sentinel_password = sentinel_parts(url)
        watchers = _sentinel_kwargs(options, sentinel_password)
        sentinel = SyncSentinel(hosts, sentinel_kwargs=watchers)  # type: ignore[no-untyped-call]
        retry = SyncRetry(NoBackoff(), 0)
        return sentinel.master_for(service, **master_options, **options, retry=retry)  # type: ignore[no-untyped-call]
    if scheme in CLUSTER_SCHEMES:
        nodes, from_url = cluster_parts(url)
        return SyncRedisCluster(
            startup_nodes=[SyncClusterNode(host, port) for host, port in nodes],  # type: ignore[no-untyped-call]
            **from_url,
            **options,
        )
    return redis.Redis.from_url(url, **options, retry=SyncRetry(NoBackoff(), 0))


async def ping(redis: Redis) -> None:
    """Check that Redis answers (RedisUnavailable when it does not)."""
    await redis.ping()


def ms_from_time(reply: tuple[int, int] | list[Any]) -> int:
    """Return Redis server time in ms from a TIME reply (seconds, microseconds)."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


async def server_ms(redis: Redis, key: str | None = None) -> int:
    """Return Redis server time in ms (the clock every script uses).

    On a cluster, from the master holding `key` when given (the clock of that key's scripts).
    """
    if key is not None and is_cluster(redis):
        return ms_from_time(await node_time(redis, key))  # type: ignore[arg-type]
    return ms_from_time(await redis.time())
