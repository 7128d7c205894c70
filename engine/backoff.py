"""Retry delays: pure functions of the retry number n (1 for the first retry)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Literal

from .errors import ConfigError

Strategy = Literal["constant", "linear", "exponential", "exponential_jitter"]
STRATEGIES: frozenset[str] = frozenset(("constant", "linear", "exponential", "exponential_jitter"))
Backoff = str | float | int | Callable[[int], float]


def validate_backoff(backoff: Backoff) -> Backoff:
    """Return `backoff` if it is a strategy name, a positive base, or a callable."""
    if callable(backoff):
        return backoff
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
    raised to n (AsyncMQ); a callable gets n and returns seconds.
    """
    if callable(backoff):
        value = float(backoff(n))
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
        else:
            value = rng(0.0, d * 2**n)
    else:
        value = float(backoff) ** n
    return max(0.0, min(value, float(max_retry_delay_s)))
