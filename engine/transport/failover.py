"""Sentinel failover: every client of one Sentinel service in this process follows a new master.

redis-py's Sentinel pool asks Sentinel for the master only when it opens a connection, so after
a planned failover its pooled connections keep talking to the old master, which accepts writes
until Sentinel demotes it (about 10 s later) and then wipes them when it resyncs from the new
one. Here each pool asks every sentinel again on a connection checkout, at most once every
`CHECK_INTERVAL_S`, and keeps the answer with the newest configuration epoch. When the master
moves, every pool of that service in the process (those of other event loops too, such as the
liveness thread's) closes every connection to the old master, in-use ones included: a blocking
read parked there fails at once and its loop retries on the new master. The non-Sentinel path
does not come here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from itertools import chain
from typing import Any, ClassVar

from redis.asyncio.sentinel import (
    MasterNotFoundError,
    SentinelConnectionPool,
    SentinelManagedConnection,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from .reconnect import wake_all

log = logging.getLogger("engine.failover")

# A pool asks Sentinel again on checkout when its last answer is at least this old.
CHECK_INTERVAL_S = 0.5
# Refusals of a master that lost its replica (min-replicas-to-write) or its master: a failover
# may be under way, so the next checkout asks Sentinel at once.
_SUSPECT = ("NOREPLICAS", "MASTERDOWN")

Address = tuple[str, int]


class MasterWatch:
    """Hold one Sentinel service's newest master address for the whole process."""

    _all: ClassVar[dict[tuple[Any, ...], MasterWatch]] = {}
    _all_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, service: str) -> None:
        self.service = service
        self.address: Address | None = None
        self.epoch = -1
        self.moves = 0
        self._pools: weakref.WeakSet[WatchedPool] = weakref.WeakSet()
        self._lock = threading.Lock()

    @classmethod
    def of(cls, sentinels: list[Address], service: str) -> MasterWatch:
        """Return the process's watch of `service` as seen by these sentinels."""
        key = (tuple(sorted(sentinels)), service)
        with cls._all_lock:
            watch = cls._all.get(key)
            if watch is None:
                watch = cls._all[key] = MasterWatch(service)
            return watch

    def add(self, pool: WatchedPool) -> None:
        """Follow `pool` (weakly) so that a move reaches it."""
        with self._lock:
            self._pools.add(pool)

    def saw(
        self, address: Address, epoch: int
    ) -> tuple[Address, Address | None, list[WatchedPool]]:
        """Record a sentinel's answer; return the address to use, the old one and pools to move.

        An answer older (by configuration epoch) than one already seen is ignored: a sentinel
        that has not heard of the failover yet must not send clients back to the old master.
        """
        with self._lock:
            if self.address is not None and (epoch < self.epoch or address == self.address):
                self.epoch = max(self.epoch, epoch)
                return self.address, None, []
            old, self.address, self.epoch = self.address, address, epoch
            if old is None:
                return address, None, []
            self.moves += 1
            return address, old, list(self._pools)


class WatchedConnection(SentinelManagedConnection):
    """A master connection that refuses to stay on an address the master has left."""

    async def connect_to(self, address: Address) -> None:
        """Connect to `address`; fail if the master moved elsewhere meanwhile."""
        await super().connect_to(address)  # type: ignore[no-untyped-call]
        current = self.connection_pool.watch.address
        if current is not None and tuple(address) != current:
            await self.disconnect()
            raise RedisConnectionError(f"the master moved to {current[0]}:{current[1]}")

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        """Read a reply; after a refusal that hints at a failover, ask Sentinel on next checkout."""
        try:
            return await super().read_response(*args, **kwargs)
        except ResponseError as exc:
            if str(exc).startswith(_SUSPECT):
                self.connection_pool.ask_soon()
            raise


class WatchedPool(SentinelConnectionPool):
    """A Sentinel master pool that notices a new master within `CHECK_INTERVAL_S` of checkout."""

    def __init__(self, service_name: str, sentinel_manager: Any, **kwargs: Any) -> None:
        kwargs.setdefault("connection_class", WatchedConnection)
        super().__init__(service_name, sentinel_manager, **kwargs)  # type: ignore[no-untyped-call]
        self.watch = MasterWatch.of(
            [_address_of(s) for s in sentinel_manager.sentinels], service_name
        )
        self.watch.add(self)
        self._checked_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drops: set[asyncio.Task[None]] = set()

    async def get_connection(self, *args: Any, **options: Any) -> Any:
        """Check out a connection, asking Sentinel first when the last answer is old."""
        now = time.monotonic()
        if now - self._checked_at >= CHECK_INTERVAL_S:
            self._checked_at = now
            self._loop = asyncio.get_running_loop()
            found = await self._ask()
            if found is not None:
                await self._learn(*found)
        return await super().get_connection(*args, **options)  # type: ignore[no-untyped-call]

    def ask_soon(self) -> None:
        """Make the next checkout ask Sentinel, however recent the last answer."""
        self._checked_at = 0.0

    async def get_master_address(self) -> Address:
        """Return the master's address (for a new connection); raise if no sentinel knows it."""
        found = await self._ask()
        if found is None:
            raise MasterNotFoundError(f"No master found for {self.service_name!r}")
        self.master_address = await self._learn(*found)
        return self.master_address

    async def _ask(self) -> tuple[Address, int] | None:
        """Ask every sentinel at once; return the sound answer with the newest epoch, or None."""
        manager = self.sentinel_manager
        replies = await asyncio.gather(
            *(s.sentinel_master(self.service_name) for s in manager.sentinels),
            return_exceptions=True,
        )
        best: tuple[Address, int] | None = None
        for state in replies:
            if not isinstance(state, dict) or not manager.check_master_state(
                state, self.service_name
            ):
                continue
            epoch = int(state.get("config-epoch", 0))
            if best is None or epoch > best[1]:
                best = ((str(state["ip"]), int(state["port"])), epoch)
        return best

    async def _learn(self, address: Address, epoch: int) -> Address:
        """Record an answer; on a move, drop every connection to the old master everywhere."""
        current, old, pools = self.watch.saw(address, epoch)
        if old is not None:
            log.warning(
                "redis master moved service=%s from=%s:%s to=%s:%s epoch=%d pools=%d",
                self.service_name,
                *old,
                *current,
                epoch,
                len(pools),
            )
        here = asyncio.get_running_loop()
        for pool in pools:
            if pool._loop is here:
                await pool.drop_old(current)
            else:
                pool.drop_old_soon(current)
        if pools:
            wake_all()
        return current

    async def drop_old(self, master: Address) -> None:
        """Close every connection (idle or in use) that is not to `master`."""
        stale = [
            c
            for c in chain(self._available_connections, self._in_use_connections)
            if c.is_connected and (getattr(c, "host", None), getattr(c, "port", None)) != master
        ]
        await asyncio.gather(*(c.disconnect(nowait=True) for c in stale), return_exceptions=True)

    def drop_old_soon(self, master: Address) -> None:
        """Run `drop_old` in this pool's own event loop (from another thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._spawn_drop, master)

    def _spawn_drop(self, master: Address) -> None:
        task = asyncio.get_running_loop().create_task(self.drop_old(master))
        self._drops.add(task)
        task.add_done_callback(self._drops.discard)


def _address_of(sentinel: Any) -> Address:
    kwargs = sentinel.connection_pool.connection_kwargs
    return str(kwargs.get("host")), int(kwargs.get("port", 26379))
