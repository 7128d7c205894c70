"""The one place that decides what an exception raised while talking to Redis means.

Every loop of the worker (claim, flush, upkeep, scheduler, cleaner), every loop of `runworker`
(mirror, relay, reconcile) and the client ask `classify`:

- `GONE`: the connection is gone (whatever redis-py, hiredis, asyncio or uvloop raise when a
  socket dies, timeouts, `OSError`). redis-py has already dropped that connection; reconnect
  with capped backoff.
- `REFUSED`: Redis answers but refuses for a while (`OOM`, `LOADING`, `BUSY`, `MASTERDOWN`,
  `READONLY` after a failover, `TRYAGAIN`, `CLUSTERDOWN`, `NOSCRIPT`...): keep the work, back
  off, retry.
- `BUG`: anything else. The loop must not swallow it: the process stops non-zero so that a
  supervisor restarts it, instead of living on with a dead loop.
"""

from __future__ import annotations

import asyncio
import enum
import os
import re
import sys
import traceback

from redis import exceptions as rx

from ..errors import RedisRefused, RedisUnavailable


class Fault(enum.Enum):
    """What an exception means for the loop that caught it."""

    GONE = "gone"
    REFUSED = "refused"
    BUG = "bug"


# First word of an error reply that means "not now" rather than "never".
REFUSALS = frozenset(
    (
        "OOM",
        "LOADING",
        "BUSY",
        "MASTERDOWN",
        "READONLY",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "NOSCRIPT",
        "NOREPLICAS",
        "MISCONF",
        "UNBLOCKED",
    )
)

_PARSED: tuple[tuple[type[Exception], str], ...] = (
    (rx.BusyLoadingError, "LOADING"),
    (rx.OutOfMemoryError, "OOM"),
    (rx.ReadOnlyError, "READONLY"),
    (rx.NoScriptError, "NOSCRIPT"),
    (rx.MasterDownError, "MASTERDOWN"),
    (rx.ClusterDownError, "CLUSTERDOWN"),
    (rx.TryAgainError, "TRYAGAIN"),
)

# redis-py rewrites an error inside a pipeline: "Command # 2 (SET k v) of pipeline caused error:
# ('NOREPLICAS Not enough good replicas to write.',)".
_IN_PIPELINE = re.compile(r"of pipeline caused error: \(?['\"]?([A-Za-z]+)")

_GONE_TYPES: tuple[type[BaseException], ...] = (
    rx.ConnectionError,
    rx.TimeoutError,
    ConnectionError,
    TimeoutError,
    OSError,
    EOFError,
    asyncio.IncompleteReadError,
)

# Where a socket that died under a command raises its own errors from: asyncio's transports,
# uvloop, redis-py's connection code and hiredis.
_TRANSPORT_DIRS = tuple(
    os.path.dirname(path) + os.sep
    for path in (asyncio.__file__, getattr(sys.modules.get("redis"), "__file__", "") or "")
    if path
)
_TRANSPORT_MODULES = ("uvloop", "hiredis")


def refusal(exc: BaseException) -> str | None:
    """Return the reply's first word if `exc` is a temporary refusal by Redis, else None."""
    if isinstance(exc, RedisRefused):
        return exc.reason
    for kind, word in _PARSED:  # redis-py strips the first word off these replies
        if isinstance(exc, kind):
            return word
    if isinstance(exc, rx.ResponseError):
        text = str(exc)
        word = text.split(" ", 1)[0].upper()
        if word == "COMMAND" and (inner := _IN_PIPELINE.search(text)):
            word = inner.group(1).upper()
        if word in REFUSALS:
            return word
    return None


def _raised_by_transport(exc: BaseException) -> bool:
    """Tell whether `exc` came out of socket or event-loop code (a transport closed under us)."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if not frames:
        return False
    last = frames[-1].filename
    return last.startswith(_TRANSPORT_DIRS) or any(m in last for m in _TRANSPORT_MODULES)


def classify(exc: BaseException, transient: tuple[type[BaseException], ...] = ()) -> Fault:
    """Return what `exc` means: connection gone, refused for now, or a bug.

    `transient` adds exception types of the caller's own world that also mean "retry later"
    (a database connection that dropped, say); they count as REFUSED.
    """
    if refusal(exc) is not None:
        return Fault.REFUSED
    if isinstance(exc, _GONE_TYPES):
        return Fault.GONE
    if transient and isinstance(exc, transient):
        return Fault.REFUSED
    if isinstance(exc, (RuntimeError, AttributeError)) and _raised_by_transport(exc):
        # uvloop: "unable to perform operation on <TCPTransport closed=True>; the handler is
        # closed"; asyncio: "'NoneType' object has no attribute '_add_writer'".
        return Fault.GONE
    return Fault.BUG


def typed(exc: BaseException, url: str) -> BaseException:
    """Return the engine's typed error for a Redis failure (`exc` itself when it is a bug).

    NOSCRIPT is left as it is: redis-py reloads the script and retries on it.
    """
    if isinstance(exc, (RedisUnavailable, rx.NoScriptError)):
        return exc
    fault = classify(exc)
    if fault is Fault.BUG:
        return exc
    reason = refusal(exc)
    if reason is not None:
        error: RedisUnavailable = RedisRefused(reason, f"Redis at {url} refused: {exc}")
    else:
        error = RedisUnavailable(f"cannot reach Redis at {url}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error
