"""Retry delays: pure functions of the retry number n (1 for the first retry)."""

from __future__ import annotations

import functools
import inspect
import math
import random
from collections.abc import Callable
from typing import Any, Literal

from .errors import ConfigError

Strategy = Literal["constant", "linear", "exponential", "exponential_jitter", "exponential_spread"]
STRATEGIES: frozenset[str] = frozenset(
    ("constant", "linear", "exponential", "exponential_jitter", "exponential_spread")
)
# exponential_spread: the exponential delay times a factor between 1 - SPREAD and 1 + SPREAD
# (a spread around the delay), where exponential_jitter draws anything from 0 to it (full jitter).
SPREAD = 0.25
# A strategy name, a base (base^n), the delays of each retry in turn ([60, 300, 900]: the last
# one repeats), a callable of n or of nothing, or None: re-queue at once.
Backoff = str | float | int | list[float] | tuple[float, ...] | Callable[..., float] | None


def validate_backoff(backoff: Backoff) -> Backoff:
    """Return `backoff` if it is a strategy name, a positive base, a list of delays, a
    callable (of the retry number or of nothing) or None."""
    if backoff is None:
        return None
    if callable(backoff):
        _arity(backoff)
        return backoff
    if isinstance(backoff, list | tuple):
        if not backoff or not all(
            isinstance(d, int | float) and not isinstance(d, bool) and math.isfinite(d) and d >= 0
            for d in backoff
        ):
            raise ConfigError(
                f"a backoff list holds one or more delays in seconds (>= 0), got {backoff!r}"
            )
        return list(backoff)
    if isinstance(backoff, str):
        if backoff not in STRATEGIES:
            raise ConfigError(f"backoff must be one of {sorted(STRATEGIES)}, got {backoff!r}")
        return backoff
    if isinstance(backoff, bool) or not isinstance(backoff, int | float) or backoff <= 0:
        raise ConfigError(f"backoff base must be a positive number, got {backoff!r}")
    return backoff


def delay_s(
    backoff: Backoff,
    n: int,
    retry_delay_s: float | None,
    max_retry_delay_s: float,
    rng: Callable[[float, float], float] = random.uniform,
) -> float | None:
    """Return the delay before retry `n`, capped at `max_retry_delay_s`; None means re-queue now.

    A strategy name needs `retry_delay_s` (None re-queues at once); a number is a base
    raised to n; a list gives retry n its n-th delay (the last one for the rest); a
    callable gets n (or nothing, if it takes no argument) and returns seconds; None re-queues
    at once.
    """
    if backoff is None:
        return None
    if callable(backoff):
        value = float(backoff(n) if _arity(backoff) else backoff())
    elif isinstance(backoff, list | tuple):
        value = float(backoff[min(n, len(backoff)) - 1])
    elif isinstance(backoff, str):
        if retry_delay_s is None:
            return None
        d = float(retry_delay_s)
        if backoff == "constant":
            value = d
        elif backoff == "linear":
            value = d * n
        elif backoff == "exponential":
            value = d * 2**n
        elif backoff == "exponential_spread":
            value = d * 2**n * rng(1 - SPREAD, 1 + SPREAD)
        else:
            value = rng(0.0, d * 2**n)
    else:
        value = float(backoff) ** n
    return max(0.0, min(value, float(max_retry_delay_s)))


@functools.lru_cache(maxsize=256)
def _arity(fn: Callable[..., Any]) -> int:
    """Return 1 if the backoff callable takes the retry number, 0 if it takes nothing."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: give it n
        return 1
    takes = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    required = [p for p in takes if p.default is p.empty and p.kind != p.VAR_POSITIONAL]
    if len(required) > 1:
        raise ConfigError(f"a backoff callable takes the retry number or nothing: {fn!r}")
    return 1 if takes else 0
