"""Redis outages as health sees them: a beat that was late because Redis was away is no death.

While Redis is unreachable (stopped, restarting, cut off) or refuses writes, every worker's beats
are late and its registry entry lapses: a health check right after Redis comes back finds no
live worker, and a schedule's ticks due meanwhile missed or late, though every worker lives.

`OutageWatch` is what one checking process saw of Redis. Its `look` (the first read of each
health check) records the outage that ended since the look before, when calls failed since
(`failed`) or when Redis restarted since (a new INFO `run_id`: a restart, or a failover to
another server), with the queues live workers served at that look before (`saw`): in Redis
(`outages_key`, the last KEPT), so every process judges alike, the API and /metrics included
(`recent_outages`). `Recovery` then excuses, for a queue served before the outage, what the
outage explains:

- for `recovery_grace_ms` after Redis came back, no live worker is `recovering`, not a failure:
  a liveness window, a heartbeat interval and a reconnect (the longest backoff sleep of a worker's
  loops, then a new connection);
- a tick or a run due by a deadline that had not passed when Redis went away is due again when
  that grace ends (`due_ms`), its tolerance counting from there.

After the grace a queue or schedule is judged as ever: workers that really died are alerted.
What no checker saw is not excused: a stall none of its calls ran into. One shorter than a
worker's command timeout (`socket_timeout_s`) needs no excuse anyway: the command a worker sent
during it is answered, and its registry entry renewed, as Redis resumes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from .. import serializer
from ..keys import outages_key
from ..ops.handle import Store
from ..resources.duties.outages import Outages
from ..settings import EngineSettings
from ..transport.connection import server_ms
from ..transport.reconnect import BACKOFF_CAP_S

# Outages kept in Redis, the oldest first to go (each checking process records those it saw).
KEPT = 32


def when(ms: int) -> str:
    """Return a time in ms since the epoch as UTC date and time."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def recovery_grace_ms(settings: EngineSettings) -> int:
    """Return how long after Redis came back a live worker may take to renew its registry entry:
    a liveness window, a heartbeat interval, and a reconnect (its loops' longest backoff sleep,
    then a new connection)."""
    s = settings
    renew_s = BACKOFF_CAP_S + s.connect_timeout_s
    return round((s.liveness_window_s + s.heartbeat_interval_s + renew_s) * 1000)


@dataclass(frozen=True, slots=True)
class Outage:
    """A span Redis was away from a checker, in server ms: from its last look before to its first
    look after; `how` ("unreachable", "restarted"); the queues live workers served at that last
    look (None: not known, so any queue)."""

    away_ms: int
    back_ms: int
    how: str = "unreachable"
    served: frozenset[str] | None = None

    def covers(self, queue: str) -> bool:
        """Tell whether the outage excuses `queue` (a live worker served it before)."""
        return self.served is None or queue in self.served

    def said(self) -> str:
        """Describe it in words."""
        what = "was unreachable" if self.how == "unreachable" else "restarted"
        return f"Redis {what} between {when(self.away_ms)} and {when(self.back_ms)}"

    def dumps(self) -> str:
        """Return it as the JSON member of the outages ZSET."""
        served = None if self.served is None else sorted(self.served)
        row = {"away_ms": self.away_ms, "back_ms": self.back_ms, "how": self.how, "served": served}
        return serializer.dumps(row).decode()

    @classmethod
    def loads(cls, text: str) -> Outage | None:
        """Return the outage a ZSET member holds (None: unreadable)."""
        try:
            row = serializer.loads(text)
            served = row.get("served")
            return cls(
                int(row["away_ms"]),
                int(row["back_ms"]),
                str(row.get("how", "unreachable")),
                None if served is None else frozenset(map(str, served)),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


@dataclass(frozen=True, slots=True)
class Recovery:
    """The recent outages, oldest first, the grace workers get after each, and the server time
    (ms) they were read at."""

    grace_ms: int
    outages: tuple[Outage, ...] = ()
    now_ms: int = 0

    def recovering(self, queue: str, now_ms: int | None = None) -> Outage | None:
        """Return the last outage whose grace the workers of `queue` are still within."""
        now = self.now_ms if now_ms is None else now_ms
        for outage in reversed(self.outages):
            if now < self.until_ms(outage) and outage.covers(queue):
                return outage
        return None

    def last(self, queue: str) -> Outage | None:
        """Return the last outage that excuses `queue`."""
        return next((o for o in reversed(self.outages) if o.covers(queue)), None)

    def until_ms(self, outage: Outage) -> int:
        """Return when the workers' grace after `outage` ends."""
        return outage.back_ms + self.grace_ms

    def said(self, outage: Outage) -> str:
        """Describe `outage` and the workers' grace after it in words."""
        return f"{outage.said()}; its workers have until {when(self.until_ms(outage))} to renew"

    def due_ms(self, queue: str, due_ms: int, tol_ms: int) -> int:
        """Return when something of `queue` due at `due_ms` (with `tol_ms` to spare) is due once
        the outages are excused: after each that began before its deadline, when the grace
        after it ends."""
        for outage in self.outages:
            if outage.covers(queue) and outage.away_ms <= due_ms + tol_ms:
                due_ms = max(due_ms, self.until_ms(outage))
        return due_ms


def _outages(client: Store) -> Outages:
    return Outages(client.settings, client.redis, client.scripts)


async def _recorded(outages: Outages) -> tuple[Outage, ...]:
    return tuple(o for o in map(Outage.loads, await outages.recorded()) if o is not None)


async def recent_outages(client: Store, grace_ms: int) -> Recovery:
    """Return the recorded outages (for a reader that does not watch: the API, /metrics)."""
    now_ms = await server_ms(client.redis, outages_key(client.settings.prefix))
    return Recovery(grace_ms, await _recorded(_outages(client)), now_ms)


class OutageWatch:
    """What one checking process saw of Redis: its last look, the queues served then, and
    whether a call failed since. One per process and Redis; its calls come one at a time."""

    def __init__(self) -> None:
        # Server ms and the server's run id at the last look, and the queues live workers
        # served then (`saw`).
        self.seen_ms: int | None = None
        self.run_id: str | None = None
        self.served: frozenset[str] | None = None
        # Monotonic time of the first call that failed since the last look (None: none did).
        self.failed_at: float | None = None

    def failed(self) -> None:
        """Note a call that failed (Redis unreachable, or refusing): away since the last look."""
        if self.failed_at is None:
            self.failed_at = time.monotonic()

    def saw(self, served: Iterable[str]) -> None:
        """Note the queues live workers serve now."""
        self.served = frozenset(served)

    async def look(self, client: Store, grace_ms: int) -> Recovery:
        """Record the outage that ended since the last look (calls failed, or Redis restarted
        since: another run id); return the recent outages."""
        outages = _outages(client)
        now_ms = await server_ms(client.redis, outages_key(client.settings.prefix))
        server = await outages.run_id()
        ended = None
        if self.failed_at is not None:
            failed_ms = now_ms - round((time.monotonic() - self.failed_at) * 1000)
            away_ms = failed_ms if self.seen_ms is None else self.seen_ms
            ended = Outage(away_ms, now_ms, "unreachable", self.served)
        elif self.seen_ms is not None and self.run_id not in (None, server):
            ended = Outage(self.seen_ms, now_ms, "restarted", self.served)
        if ended is not None:
            await outages.record(ended.dumps(), ended.back_ms, KEPT)
        self.seen_ms, self.run_id, self.failed_at = now_ms, server, None
        return Recovery(grace_ms, await _recorded(outages), now_ms)
