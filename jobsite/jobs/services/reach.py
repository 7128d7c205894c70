"""Whether the engine's Redis answers, as this process last saw it: one state per process.

Every service call reports here (`twins`, services/engineloop.py), and every surface says the
same: the dashboard's socket and GET /live in their `redis` field, every API answer in its
`Jobsite-Redis` header, every page in its config. The state changes only on a transition: a
call that fails after success makes it down, since that first failure; a call that succeeds
after failures makes it up, since then. Failures in between change nothing, so "since" holds
still for the whole outage; each outage is logged once, as it begins, and once as it ends.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from engine import RedisRefused

log = logging.getLogger("jobsite.redis")

# Refusals of a Redis that answers but takes no writes for now (out of memory, a replica, a
# failed snapshot): reads still work, so these are no outage.
WRITES_REFUSED = frozenset({"OOM", "READONLY", "NOREPLICAS", "MISCONF"})


@dataclass(frozen=True, slots=True)
class Reach:
    """Redis up or down, since `since_ms` (ms since the epoch, this server's clock; 0: up since
    before this process's first call, so it tells of no transition)."""

    up: bool
    since_ms: int

    def shown(self) -> dict[str, Any]:
        """Return the state as the socket and GET /live send it."""
        return {"up": self.up, "since_ms": self.since_ms}

    def header(self) -> str:
        """Return the state as the Jobsite-Redis header says it: "up <ms>" or "down <ms>"."""
        return f"{'up' if self.up else 'down'} {self.since_ms}"


_state = Reach(up=True, since_ms=0)
_lock = threading.Lock()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def current() -> Reach:
    """Return the state as this process last saw it."""
    return _state


def answered() -> Reach:
    """Note a call Redis answered; return the state (up, since now if it was down)."""
    global _state
    if _state.up:  # the hot path: no lock
        return _state
    with _lock:
        if not _state.up:
            now = _now_ms()
            log.info("redis answers again down_s=%.1f", (now - _state.since_ms) / 1000)
            _state = Reach(up=True, since_ms=now)
        return _state


def failed(exc: BaseException) -> Reach:
    """Note a call that failed with `exc` (a RedisUnavailable); return the state (down since
    the first failure of the outage)."""
    global _state
    if not _state.up or (isinstance(exc, RedisRefused) and exc.reason in WRITES_REFUSED):
        return _state
    with _lock:
        if _state.up:
            _state = Reach(up=False, since_ms=_now_ms())
            cause = exc.__cause__ or exc
            log.warning(
                "redis unreachable since_ms=%d error=%s", _state.since_ms, type(cause).__name__
            )
        return _state
