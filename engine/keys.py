"""QueueKeys: the only place that spells a Redis key."""

from __future__ import annotations

import functools
import os
import re
import time
from dataclasses import dataclass, field

from .errors import ConfigError

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
# The rule for job ids a caller chooses (the API's schema uses the same pattern).
# 1-128 characters, never starting with a dot (so "." and ".." never reach a URL path); "@"
# joins a repeatable's name to its tick in the ids the scheduler makes ("nightly@1767225600000").
JOB_ID_PATTERN = r"^[A-Za-z0-9_:@-][A-Za-z0-9._:@-]{0,127}$"
_JOB_ID = re.compile(JOB_ID_PATTERN)
# The ids a caller may choose: the same without "@", which only the scheduler's tick ids hold,
# so no caller can take a tick's id ahead of its tick.
CHOSEN_JOB_ID_PATTERN = r"^[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}$"
_CHOSEN_JOB_ID = re.compile(CHOSEN_JOB_ID_PATTERN)


# The keys every state-changing script takes first, in this order (common.lua's `queue()`).
QUEUE_KEYS: tuple[str, ...] = (
    "submitted",
    "scheduled",
    "blocked",
    "started",
    "dlq",
    "events",
    "marker",
    "seq",
    "stats",
    "meta",
    "deadlines",
)

# The KEYS of each Lua script, in order (engine/lua/<verb>-N.lua, N = len).
SCRIPT_KEYS: dict[str, tuple[str, ...]] = {
    "submit": (*QUEUE_KEYS, "repeat_due", "repeat_last"),
    "claim": (*QUEUE_KEYS, "unserved"),
    "begin": ("started", "stats"),
    "heartbeat": ("started",),
    "progress": ("events",),
    "log": ("events",),
    "checkpoint": ("started",),
    "complete": QUEUE_KEYS,
    "retry": QUEUE_KEYS,
    "fail": QUEUE_KEYS,
    "stall": QUEUE_KEYS,
    "release": ("started", "submitted", "events", "marker"),
    "disown": ("started", "submitted", "events", "marker"),
    "promote": QUEUE_KEYS,
    "reap": QUEUE_KEYS,
    "expire": QUEUE_KEYS,
    "cancel": QUEUE_KEYS,
    "prune": ("dlq", "deadlines"),
    "purge": ("dlq", "deadlines"),
    "resubmit": QUEUE_KEYS,
    "declare": ("repeats", "repeat_due", "repeat_last", "declared"),
    "snapshot": ("events",),
    "trim": ("events", "stats", "missed"),
    "unserved": (*QUEUE_KEYS, "unserved", "served"),
    "drain": QUEUE_KEYS,
}


def validate_queue_name(queue: str) -> str:
    """Return `queue` if it is a valid queue name, else raise ConfigError."""
    if not isinstance(queue, str) or not _QUEUE_NAME.match(queue):
        raise ConfigError(f"queue names are 1-100 characters of [A-Za-z0-9._-], got {queue!r}")
    return queue


def check_job_id(job_id: str) -> str:
    """Return `job_id` if it matches JOB_ID_PATTERN, else raise ConfigError naming it."""
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        raise ConfigError(
            f"job ids are 1-128 characters of [A-Za-z0-9._:@-], not starting with '.'; "
            f"got {job_id!r}"
        )
    return job_id


def check_chosen_job_id(job_id: str) -> str:
    """Return `job_id` if a caller may choose it (CHOSEN_JOB_ID_PATTERN), else raise ConfigError."""
    check_job_id(job_id)
    if not _CHOSEN_JOB_ID.fullmatch(job_id):
        raise ConfigError(f"'@' is kept for the ids of schedule ticks; got {job_id!r}")
    return job_id


def new_job_id() -> str:
    """Return a fresh job id that sorts by creation time: a UUIDv7 (RFC 9562) in 32 hex digits.

    Time-ordered ids put the history's new rows and index entries on the same few hot pages
    instead of a random page each.
    """
    value = (time.time_ns() // 1_000_000 & (1 << 48) - 1) << 80 | int.from_bytes(os.urandom(10))
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # variant 10
    return f"{value:032x}"


def queues_key(prefix: str) -> str:
    """Return the key of the set of known queue names."""
    return f"{prefix}:queues"


def id_owner_key(prefix: str, job_id: str) -> str:
    """Return the key naming the queue that owns a chosen job id (one id, one job, any queue)."""
    return f"{prefix}:id:{job_id}"


def event_groups_key(prefix: str) -> str:
    """Return the key of the HASH of opt-in consumer groups of the event streams -> last read
    ms (engine/periodic/transitions.py: trimming honours those read lately)."""
    return f"{prefix}:event_groups"


def health_key(prefix: str, kind: str, name: str) -> str:
    """Return the key holding the last recorded health state of a schedule ("schedule",
    "queue/name") or a queue ("queue", its name): periodic/schedule_health.py's swap_state."""
    return f"{prefix}:health:{kind}:{name}"


def outages_key(prefix: str) -> str:
    """Return the ZSET of the recent Redis outages health excuses (periodic/outages.py): the
    outage as JSON -> the server ms Redis was seen back."""
    return f"{prefix}:health:outages"


def ack_fence_key(key: str) -> str:
    """Return the key a replica-ack fence writes (engine/transport/acks.py), in the cluster slot
    of `key`: `key` up to its hash tag then `:ack_fence` (`jobsite:{default}:ack_fence`)."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    if end > start + 1:
        return f"{key[: end + 1]}:ack_fence"
    return f"{{{key}}}:ack_fence"  # no tag: the whole key hashes alike as a tag


def hash_format_key(prefix: str) -> str:
    """Return the key of the storage format of job hashes (engine/seam/hashformat.py)."""
    return f"{prefix}:hash_format"


def workers_key(prefix: str) -> str:
    """Return the key of the worker registry ZSET (worker id -> last seen ms)."""
    return f"{prefix}:workers"


def worker_key(prefix: str, worker_id: str) -> str:
    """Return the key of one worker's info HASH (expires when the worker stops renewing it)."""
    return f"{prefix}:worker:{worker_id}"


def alive_key(prefix: str, worker_id: str) -> str:
    """Return the key of one worker's liveness (renewed by its liveness thread, expires after)."""
    return f"{prefix}:alive:{worker_id}"


def control_key(prefix: str, worker_id: str) -> str:
    """Return the key of an order to one worker ("quiet", "stop"; absent: claim), which it
    reads with its registry renewal (engine/ops/control.py)."""
    return f"{prefix}:control:{worker_id}"


# The hash tag of the keys of worker roles (engine/resources/roles.py): they share a slot (one
# transaction writes both), and "@" is in no queue name, so no queue's keys carry this tag.
ROLES_TAG = "{@roles}"


def roles_key(prefix: str) -> str:
    """Return the key of the HASH of role name -> JSON of its queues and when it changed."""
    return f"{prefix}:{ROLES_TAG}:defs"


def roles_version_key(prefix: str) -> str:
    """Return the key of the counter every role change increments (workers poll it, cheaply)."""
    return f"{prefix}:{ROLES_TAG}:version"


def version_tag(task: str, version: int | str) -> str:
    """Return how a task version is named in the unserved and build SETs: `task@version`."""
    return f"{task}@{version}"


def stop_field(worker_id: str) -> str:
    """Return the meta field that fences a stopping worker's claims (claim-12.lua reads it)."""
    return f"stop:{worker_id}"


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
    def events(self) -> str:
        """STREAM of every transition."""
        return f"{self.base}:events"

    @property
    def missed(self) -> str:
        """SET of job ids whose events were trimmed before the mirror read them (trim-3.lua)."""
        return f"{self.base}:missed"

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
        """HASH of terminal state -> jobs that reached it (totals), plus metrics fields.

        `waiting_version` counts the jobs set aside for a task version no claiming worker had
        (claim-12.lua; the `unserved` SET and ZSETs hold them).
        `waiting_turn` counts the jobs waiting for their concurrency key's turn, and
        `turn|<waiting ZSET key>` those of one key (deleted at zero; common.lua's turn).

        Metrics fields (common.lua, resources/metrics.py): `done|<task>|<state>` per task totals,
        and the `run`/`wait` histograms as `<kind>|<task>|<le_ms>` and `<kind>|<task>|sum_ms`.
        The history's gaps (trim-3.lua, the mirror): `gap_entries`, `gap_jobs`,
        `gap_unrecorded`, `gap_rebuilt`, `gap_lost`, `gap_resynced` (unrecorded jobs a resync
        rebuilt).
        """
        return f"{self.base}:stats"

    @property
    def meta(self) -> str:
        """HASH of queue settings (paused, rate_interval_ms), rate limiter state (tat fields) and
        `stop:<worker id>` while that worker stops (stop_field)."""
        return f"{self.base}:meta"

    @property
    def unserved(self) -> str:
        """SET of the task@versions (version_tag) of the jobs set aside because the worker that
        popped them lacks that version (claim-12.lua); each has a ZSET, `unserved_jobs`."""
        return f"{self.base}:unserved"

    @property
    def unserved_prefix(self) -> str:
        """Prefix of the ZSETs of jobs set aside per task@version; scripts append the tag."""
        return f"{self.base}:unserved:"

    def unserved_jobs(self, tag: str) -> str:
        """Return the key of the ZSET of jobs waiting for a worker with task@version `tag`."""
        return f"{self.unserved_prefix}{tag}"

    @property
    def served(self) -> str:
        """HASH of task@version -> when a worker serving this queue with it was last seen (ms)."""
        return f"{self.base}:served"

    def build(self, digest: str) -> str:
        """Return the key of the SET of task@versions a worker build runs (expires unless
        renewed); `digest` names the set (engine/resources/versions.py)."""
        return f"{self.base}:build:{digest}"

    @property
    def draining(self) -> str:
        """HASH of the queue's last drain (engine/resources/drain.py): its progress and outcome."""
        return f"{self.base}:draining"

    @property
    def job_prefix(self) -> str:
        """Prefix of job hashes; scripts append the id."""
        return f"{self.base}:job:"

    @property
    def job_pattern(self) -> str:
        """SCAN pattern of the queue's job hashes (the hash tag's braces escaped)."""
        return self.job_prefix.replace("{", "\\{").replace("}", "\\}") + "*"

    @property
    def repeats(self) -> str:
        """HASH of repeatable name -> definition JSON."""
        return f"{self.base}:repeats"

    @property
    def repeat_due(self) -> str:
        """ZSET of active repeatable name -> next tick ms (paused ones are absent)."""
        return f"{self.base}:repeat_due"

    @property
    def repeat_last(self) -> str:
        """HASH of repeatable name -> id of the job its last tick submitted."""
        return f"{self.base}:repeat_last"

    @property
    def declared(self) -> str:
        """SET of the repeatable names the last sync of declared schedules (settings) owns."""
        return f"{self.base}:declared"

    @property
    def children_prefix(self) -> str:
        """Prefix of the SETs of jobs waiting for a parent; scripts append the parent's id."""
        return f"{self.base}:children:"

    def children(self, job_id: str) -> str:
        """Return the key of the SET of jobs that wait for `job_id` to complete."""
        return f"{self.children_prefix}{job_id}"

    def dedup(self, dedup_id: str) -> str:
        """Return the key naming the job that holds deduplication id `dedup_id`."""
        return f"{self.base}:dedup:{dedup_id}"

    def concurrency(self, key: str) -> tuple[str, str]:
        """Return the keys of a concurrency key: SET of admitted job ids, ZSET of waiting ones."""
        return f"{self.base}:ckey:{key}:active", f"{self.base}:ckey:{key}:waiting"

    def concurrency_key_of(self, redis_key: str) -> tuple[str, str]:
        """Return (concurrency key, "active" or "waiting") of a key `concurrency()` spelled."""
        name, _, kind = redis_key[len(f"{self.base}:ckey:") :].rpartition(":")
        return name, kind

    def rate(self, key: str) -> str:
        """Return the key of a rate key's budget: a STRING holding the key's next free start
        (ms, its theoretical arrival time), which expires when that time comes, so a key left
        idle leaves nothing behind (include/rate_limits.lua)."""
        return f"{self.base}:rate:{key}"

    def job(self, job_id: str) -> str:
        """Return the key of a job's hash.

        Its `logs` field holds the job's log lines (log-1.lua), so they expire and are deleted
        with the hash, never on their own.
        """
        return f"{self.base}:job:{job_id}"

    def for_script(self, verb: str) -> tuple[str, ...]:
        """Return the KEYS of script `verb` for this queue, in the script's order."""
        return _script_keys(self, verb)


@functools.lru_cache(maxsize=1024)
def _script_keys(keys: QueueKeys, verb: str) -> tuple[str, ...]:
    """Spell a script's KEYS once per queue and verb (a one-job enqueue spelled 13 each time)."""
    return tuple(getattr(keys, name) for name in SCRIPT_KEYS[verb])


@functools.lru_cache(maxsize=1024)
def queue_keys(prefix: str, queue: str) -> QueueKeys:
    """Return the keys of `queue`, made once: a client needs them on every enqueue."""
    return QueueKeys(prefix, queue)
