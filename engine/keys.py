"""QueueKeys: the only place that spells a Redis key."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import ConfigError

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


# The KEYS of each Lua script, in order (engine/lua/<verb>-N.lua, N = len).
SCRIPT_KEYS: dict[str, tuple[str, ...]] = {
    "submit": ("submitted", "scheduled", "events", "marker", "seq", "deadlines"),
    "claim": ("submitted", "started", "events", "marker", "seq", "dlq", "done", "stats", "meta"),
    "begin": ("started",),
    "heartbeat": ("started",),
    "progress": ("events",),
    "complete": ("started", "done", "events", "stats"),
    "retry": (
        "started",
        "submitted",
        "scheduled",
        "events",
        "marker",
        "seq",
        "dlq",
        "done",
        "stats",
    ),
    "fail": ("started", "dlq", "done", "events", "stats"),
    "release": ("started", "submitted", "events", "marker"),
    "promote": ("scheduled", "submitted", "events", "marker", "seq"),
    "reap": ("started", "submitted", "dlq", "done", "events", "marker", "stats"),
    "expire": ("deadlines", "submitted", "scheduled", "blocked", "dlq", "done", "events", "stats"),
    "cancel": ("submitted", "scheduled", "blocked", "dlq", "done", "events", "stats", "deadlines"),
    "prune": ("done", "dlq", "deadlines"),
    "purge": ("dlq", "done", "deadlines"),
    "resubmit": ("dlq", "done", "submitted", "events", "marker", "seq"),
}


def validate_queue_name(queue: str) -> str:
    """Return `queue` if it is a valid queue name, else raise ConfigError."""
    if not isinstance(queue, str) or not _QUEUE_NAME.match(queue):
        raise ConfigError(f"queue names are 1-100 characters of [A-Za-z0-9._-], got {queue!r}")
    return queue


def queues_key(prefix: str) -> str:
    """Return the key of the set of known queue names."""
    return f"{prefix}:queues"


def workers_key(prefix: str) -> str:
    """Return the key of the worker registry ZSET (worker id -> last seen ms)."""
    return f"{prefix}:workers"


def worker_key(prefix: str, worker_id: str) -> str:
    """Return the key of one worker's info HASH (expires when the worker stops renewing it)."""
    return f"{prefix}:worker:{worker_id}"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Keys of one queue; the queue is a hash tag so every script touches one slot."""

    prefix: str
    queue: str
    base: str = field(init=False)

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)
        object.__setattr__(self, "base", f"{self.prefix}:{{{self.queue}}}")

    @property
    def submitted(self) -> str:
        """ZSET of ready job ids, scored by priority band then arrival."""
        return f"{self.base}:submitted"

    @property
    def scheduled(self) -> str:
        """ZSET of job id -> run_at_ms."""
        return f"{self.base}:scheduled"

    @property
    def blocked(self) -> str:
        """SET of job ids waiting for parents."""
        return f"{self.base}:blocked"

    @property
    def started(self) -> str:
        """ZSET of job id -> lease deadline ms."""
        return f"{self.base}:started"

    @property
    def dlq(self) -> str:
        """ZSET of job id -> dead_at_ms."""
        return f"{self.base}:dlq"

    @property
    def done(self) -> str:
        """ZSET of finished job id -> expires_at_ms (retention)."""
        return f"{self.base}:done"

    @property
    def events(self) -> str:
        """STREAM of every transition."""
        return f"{self.base}:events"

    @property
    def deadlines(self) -> str:
        """ZSET of queued job id -> deadline ms (ttl, good_until, queue_timeout)."""
        return f"{self.base}:deadlines"

    @property
    def marker(self) -> str:
        """ZSET wake-up key idle workers block on (BZPOPMIN)."""
        return f"{self.base}:marker"

    @property
    def seq(self) -> str:
        """Counter giving arrival order and lease tokens."""
        return f"{self.base}:seq"

    @property
    def stats(self) -> str:
        """HASH of terminal state -> jobs that reached it (totals)."""
        return f"{self.base}:stats"

    @property
    def meta(self) -> str:
        """HASH of queue settings (paused, limits)."""
        return f"{self.base}:meta"

    @property
    def job_prefix(self) -> str:
        """Prefix of job hashes; scripts append the id."""
        return f"{self.base}:job:"

    def job(self, job_id: str) -> str:
        """Return the key of a job's hash."""
        return f"{self.base}:job:{job_id}"

    def for_script(self, verb: str) -> list[str]:
        """Return the KEYS of script `verb` for this queue, in the script's order."""
        return [getattr(self, name) for name in SCRIPT_KEYS[verb]]
