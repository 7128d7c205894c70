"""Producer-side limits: deduplication ids and modes, rate strings, values from arguments."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

DEDUP_MODES = ("simple", "throttle", "debounce")
# What a job does when its rate limit has no free slot: wait for its slot (claimed later),
# drop (ends `cancelled` at submit, never runs), reschedule (`scheduled` at its slot at submit).
RATE_LIMIT_POLICIES = ("wait", "drop", "reschedule")
_RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# The interval between starts a rate may set: at most a day (a longer one, "1/999999999s", stops
# a queue or task for years: a typo, not a limit), at least a microsecond (the stored precision).
MAX_RATE_INTERVAL_MS = 86_400_000.0
MIN_RATE_INTERVAL_MS = 0.001
# A value computed from a call's arguments, or a constant.
FromArgs = str | Callable[..., str]


@dataclass(frozen=True, slots=True)
class Deduplication:
    """One job per `id` at a time: simple (until it finishes), throttle (for ttl_s), debounce
    (the newest replaces the waiting one and its delay restarts)."""

    id: FromArgs
    mode: str = "simple"
    ttl_s: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in DEDUP_MODES:
            raise ConfigError(
                f"deduplication mode must be one of {', '.join(DEDUP_MODES)}, not {self.mode!r}"
            )
        if not callable(self.id) and (not isinstance(self.id, str) or not self.id):
            raise ConfigError("deduplication id must be a non-empty string or a function")
        if self.ttl_s is not None and self.ttl_s <= 0:
            raise ConfigError(f"deduplication ttl must be positive, got {self.ttl_s}")
        if self.mode == "throttle" and self.ttl_s is None:
            raise ConfigError("deduplication mode 'throttle' needs a ttl")

    @classmethod
    def of(cls, value: Deduplication | Mapping[str, Any]) -> Deduplication:
        """Build from a Deduplication or a dict {id, mode, ttl} (ttl in seconds)."""
        if isinstance(value, Deduplication):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"deduplication must be a dict {{id, mode, ttl}}, got {value!r}")
        unknown = set(value) - {"id", "mode", "ttl", "ttl_s"}
        if unknown or "id" not in value:
            raise ConfigError(
                f"deduplication takes id, mode and ttl; got {', '.join(sorted(value))}"
            )
        ttl = value.get("ttl_s", value.get("ttl"))
        return cls(value["id"], value.get("mode", "simple"), ttl)


def rate_interval_ms(rate: str | tuple[float, float]) -> float:
    """Return the interval between starts of a rate like "10/s", "600/m", "5/2s" or (10, 1.0),
    from a microsecond to a day."""
    try:
        if isinstance(rate, str):
            count, _, period = rate.replace(" ", "").partition("/")
            scale = _RATE_UNITS[period[-1:]]
            period_s = float(period[:-1] or 1) * scale
            limit = float(count)
        else:
            limit, period_s = float(rate[0]), float(rate[1])
    except (KeyError, ValueError, TypeError, IndexError):
        raise ConfigError(
            f"rate_limit must look like '10/s', '600/m', '5/2s' or (10, 1.0), not {rate!r}"
        ) from None
    if not limit > 0 or not period_s > 0:
        raise ConfigError(f"rate_limit must be a positive count per positive period, not {rate!r}")
    interval_ms = period_s * 1000 / limit
    if not MIN_RATE_INTERVAL_MS <= interval_ms <= MAX_RATE_INTERVAL_MS:
        raise ConfigError(
            f"rate_limit must allow from one start a day to 1,000,000 starts a second, not {rate!r}"
        )
    return interval_ms


def check_rate_policy(policy: object) -> str:
    """Return `policy` if it is one of RATE_LIMIT_POLICIES, else raise ConfigError."""
    if policy not in RATE_LIMIT_POLICIES:
        raise ConfigError(
            f"on_rate_limit must be one of {', '.join(RATE_LIMIT_POLICIES)}, not {policy!r}"
        )
    return str(policy)


def from_args(value: FromArgs, what: str, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """Return `value`, or what it returns for the call's arguments; a non-empty string."""
    out = value(*args, **kwargs) if callable(value) else value
    if not isinstance(out, str) or not out:
        raise ConfigError(f"{what} must be a non-empty string, got {out!r}")
    return out


def check_limit(limit: object) -> int:
    """Return a concurrency limit if it is an integer >= 1, else raise ConfigError."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"concurrency_limit must be an integer >= 1, got {limit!r}")
    return limit
