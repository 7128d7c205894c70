"""EngineSettings: the one frozen configuration object, built at the edge and passed explicitly."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus, urlsplit

from .errors import ConfigError

# Schemes of Redis Cluster URLs (transport/cluster.py): redis+cluster://h1:p1,h2:p2 (TLS: rediss+).
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")

# How long a job's hash (its result or error) is kept after it ended, unless its task or call
# says otherwise (TaskOptions.result_ttl_s) or the engine ended it (default_result_ttl_s).
DEFAULT_RESULT_TTL_S = 86_400
# Largest checkpoint a task may save (EngineSettings.checkpoint_max_bytes), bytes of JSON.
DEFAULT_CHECKPOINT_MAX_BYTES = 64 * 1024

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# Query parameters whose name contains one of these words hold secrets.
_SECRET_WORDS = ("password", "secret", "token", "auth")


def redact_url(url: str) -> str:
    """Return `url` with its password and secret query values replaced by ***; never raise.

    Takes any form, well-formed or not: redis://, rediss://, unix:// sockets, comma-separated
    hosts (Sentinel, cluster). The userinfo ends at the last @ and the password is all of it
    after its first :, so a password with an unencoded @ / ? or # stays hidden too.
    """
    scheme = _SCHEME.match(url)
    head = scheme.group() if scheme else ""
    userinfo, at, tail = url[len(head) :].rpartition("@")
    if ":" in userinfo:
        userinfo = userinfo.partition(":")[0] + ":***"
    shown, question, query = f"{head}{userinfo}{at}{tail}".partition("?")
    return f"{shown}{question}{_redact_query(query)}" if question else shown


def _redact_query(query: str) -> str:
    """Hide the values of secret parameters, and any &-piece without = that follows one."""
    out: list[str] = []
    hiding = False
    for piece in query.split("&"):
        name, equals, _ = piece.partition("=")
        if hiding and not equals:
            continue  # an unencoded & inside the secret value
        hiding = bool(equals) and any(w in unquote_plus(name).lower() for w in _SECRET_WORDS)
        out.append(f"{name}=***" if hiding else piece)
    return "&".join(out)


def _check_timeout(value: Any) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9
    ):
        raise ConfigError(f"timeouts are positive seconds or None, got {value!r}")


def _queue_timeouts(value: Any) -> tuple[tuple[str, float | None, float | None], ...]:
    """Return queue_timeouts as sorted (queue, worker_timeout_s, queue_timeout_s) tuples."""
    if isinstance(value, Mapping):
        rows = []
        for queue, limits in value.items():
            if not isinstance(limits, Mapping):
                raise ConfigError(f"queue_timeouts[{queue!r}] must be a mapping")
            unknown = sorted(set(limits) - {"worker_timeout_s", "queue_timeout_s"})
            if unknown:
                raise ConfigError(f"queue_timeouts[{queue!r}]: unknown keys {unknown}")
            rows.append((queue, limits.get("worker_timeout_s"), limits.get("queue_timeout_s")))
        value = rows
    try:
        rows = [(str(q), w, t) for q, w, t in value]
    except (TypeError, ValueError):
        raise ConfigError(f"queue_timeouts must map queues to timeouts, got {value!r}") from None
    return tuple(sorted(rows, key=lambda row: row[0]))


def _positive(owner: str, **values: float | int | None) -> None:
    for name, value in values.items():
        if value is not None and not value > 0:
            raise ConfigError(f"{owner}{name} must be positive, got {value!r}")


def _not_negative(owner: str, **values: float | int) -> None:
    for name, value in values.items():
        if not value >= 0:
            raise ConfigError(f"{owner}{name} must be 0 or more, got {value!r}")


# The settings of one owner each, built by EngineSettings from its fields (whose names and
# defaults stay the one place a value is given: EngineSettings(cleaner_batch=...) and the flat
# JOBSITE keys), and checked by the owner's group as it is built. An owner reads its group:
# `settings.cleaner.batch`.


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """The event stream's: the scripts' XADD cap, the cleaner's trim, the history's group."""

    maxlen: int
    group: str
    kept_without_group: int

    def __post_init__(self) -> None:
        _positive("events_", maxlen=self.maxlen, kept_without_group=self.kept_without_group)

    @property
    def emergency_maxlen(self) -> int:
        """Return the cap every script's XADD keeps (MAXLEN ~), reached only if no cleaner runs."""
        return 2 * self.maxlen


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """The cleaner's (engine/periodic/cleaner.py): its pace, its batches, the dead-letter
    queues' bounds and when a job no worker's version serves is dropped."""

    interval_s: float
    batch: int
    dlq_max_age_s: int
    dlq_max_len: int
    unserved_drop_after_s: float

    def __post_init__(self) -> None:
        _positive("cleaner_", interval_s=self.interval_s, batch=self.batch)
        _not_negative(
            "",
            dlq_max_age_s=self.dlq_max_age_s,
            dlq_max_len=self.dlq_max_len,
            unserved_drop_after_s=self.unserved_drop_after_s,
        )


@dataclass(frozen=True, slots=True)
class ShutdownSettings:
    """A worker's stop (engine/worker/shutdown.py, exitbound.py): the jobs' grace, then the
    bound on what follows."""

    grace_s: float
    exit_s: float

    def __post_init__(self) -> None:
        _not_negative("shutdown_", grace_s=self.grace_s)
        _positive("shutdown_", exit_s=self.exit_s)


@dataclass(frozen=True, slots=True)
class RecycleSettings:
    """When a worker retires (engine/worker/recycle.py); 0: no limit."""

    max_jobs: int
    max_rss_mib: float
    max_age_s: float

    def __post_init__(self) -> None:
        _not_negative(
            "", max_jobs=self.max_jobs, max_rss_mib=self.max_rss_mib, max_age_s=self.max_age_s
        )

    @property
    def on(self) -> bool:
        """Tell whether any limit is set."""
        return bool(self.max_jobs or self.max_rss_mib or self.max_age_s)


@dataclass(frozen=True, slots=True)
class JobLogSettings:
    """The per-job log's bounds (`job.log`): the newest lines kept, by count and by bytes."""

    max_lines: int
    max_bytes: int

    def __post_init__(self) -> None:
        _positive("job_log_", max_lines=self.max_lines, max_bytes=self.max_bytes)


@dataclass(frozen=True, slots=True)
class ReplicaAckSettings:
    """Writes replicas acknowledge (engine/transport/acks.py): how many, and how long to wait."""

    acks: int
    timeout_ms: int

    def __post_init__(self) -> None:
        if isinstance(self.acks, bool) or not isinstance(self.acks, int):
            raise ConfigError(f"replica_acks must be an int, got {self.acks!r}")
        if self.acks < 0:
            raise ConfigError(f"replica_acks must be 0 or more, got {self.acks!r}")
        timeout_ms = self.timeout_ms
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms <= 0:
            raise ConfigError(
                f"replica_ack_timeout_ms must be a positive int (WAIT 0 waits for ever), "
                f"got {timeout_ms!r}"
            )

    @property
    def wait_s(self) -> float:
        """Return how long a command may wait for replicas (0 with acks off): what every
        connection's socket timeout adds to its own."""
        return self.timeout_ms / 1000 if self.acks else 0.0


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Configure the engine; every duration carries its unit in its name."""

    # Where Redis is: redis://, rediss://, unix://, redis+sentinel:// or redis+cluster://.
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Every key starts with this; the queue name follows as a hash tag.
    prefix: str = "jobsite"
    # Largest args + kwargs of one job, as JSON: a bigger enqueue raises PayloadTooLarge.
    max_payload_bytes: int = 1 << 20
    # Check each enqueued job's arguments against its task's type hints before anything is
    # written (engine/arguments.py): ArgumentTypeError names the task, the argument, what was
    # expected and what was given. Off by default; the test kits turn it on.
    check_argument_types: bool = False
    # How long a claim stays valid without renewal: at least two heartbeats (stale_floor_s).
    lease_ms: int = 30_000
    # Most jobs one claim script call takes.
    claim_batch: int = 100
    # The hard cap of each queue's event stream, in entries (about 100 bytes each: 1,000,000 is
    # about 100 MiB; three entries a job). Below it the cleaner trims only what `events_group`
    # acknowledged; past it, it trims even what that group never read and records the jobs
    # (trim-3.lua). The scripts' own XADD cap is twice this (stream.emergency_maxlen).
    events_maxlen: int = 1_000_000
    # The consumer group that must see every event (the mirror's); "" : none, only the cap.
    events_group: str = "mirror"
    # Entries a stream keeps while that group does not exist on it (no mirror ever started:
    # nobody reads them).
    events_kept_without_group: int = 100_000
    # Longest sleep of the scheduler between promotions.
    scheduler_interval_s: float = 0.5
    # Most due jobs one promote script call moves from scheduled to submitted.
    promote_batch: int = 1_000
    # How long an idle worker blocks on the wake-up key before looking again.
    idle_wait_s: float = 1.0
    # How long the hash of a job the engine ended itself (cancelled, expired, lost, dropped,
    # drained, replaced) is kept; a job its task ended keeps the task's result_ttl_s.
    default_result_ttl_s: int = DEFAULT_RESULT_TTL_S
    # How long a job id a caller chose stays reserved for its queue (keys.id_owner_key); None
    # keeps it for good. The Django app makes it outlast the history's longest retention, so no
    # other queue's job can take an id while any record of it exists.
    chosen_id_ttl_s: int | None = 30 * 86_400
    # The shortest interval between two ticks of a repeatable (every_s or cron).
    min_repeat_interval_s: float = 1.0
    # How often a worker renews its leases, reads cancel marks and refreshes its registry entry.
    # Every stale threshold it renews is at least twice this: lease_ms, and a task's
    # max_heartbeat_interval_s (the worker refuses to start with a task below it).
    heartbeat_interval_s: float = 0.5
    # A worker whose liveness key (renewed by a thread, every quarter of this) is older is dead:
    # the cleaner hands its jobs back without waiting for their leases.
    liveness_window_s: float = 2.0
    # Child processes a worker may run suspects in, one suspect each (engine/running/isolate.py).
    isolation_processes: int = 2
    # How often the cleaner looks for expired leases, dead workers, deadlines and retention.
    cleaner_interval_s: float = 1.0
    # Most jobs one cleaner script call reaps, expires, prunes or drops per queue.
    cleaner_batch: int = 1_000
    # After SIGTERM: how long running jobs may finish before on_shutdown applies.
    shutdown_grace_s: float = 10.0
    # After the jobs (the grace, then on_shutdown): how long their outcomes, the hooks and the
    # goodbyes to Redis may take before the worker exits anyway; what is not written by then is
    # handed back by another worker's cleaner once the leases lapse (engine/worker/exitbound.py).
    shutdown_exit_s: float = 5.0
    # How long a dead letter stays in its queue's DLQ before the cleaner drops it (0: no limit).
    dlq_max_age_s: int = 30 * 86_400
    # Most entries each queue's dead-letter queue keeps (0: no cap); the oldest go first.
    dlq_max_len: int = 100_000
    # How long opening a Redis connection may take.
    connect_timeout_s: float = 1.0
    # Command timeout of workers; producers (Client) use client_timeout_s to fail fast.
    socket_timeout_s: float = 5.0
    # Command timeout of producers and readers (Client, SyncClient: the Django app's too).
    client_timeout_s: float = 1.0
    # Replicas that must acknowledge each script call's writes (Redis WAIT on the connection
    # that made them) before its caller is answered; 0: none asked for, no WAIT sent. Fewer
    # within replica_ack_timeout_ms raise ReplicaAckTimeout, retried like any refusal.
    replica_acks: int = 0
    # How long a write waits for those replicas (WAIT's timeout; never 0, which waits for ever).
    # Every command's socket timeout grows by it while replica_acks is on.
    replica_ack_timeout_ms: int = 1000
    # Per-job log lines (`job.log`): the newest lines kept, by count and by bytes of JSON text.
    job_log_max_lines: int = 200
    # Most bytes of JSON text a job's kept log lines take.
    job_log_max_bytes: int = 64 * 1024
    # Largest state a task may save with `checkpoint()`, as JSON: a bigger one raises
    # CheckpointTooLarge in the task and saves nothing.
    checkpoint_max_bytes: int = DEFAULT_CHECKPOINT_MAX_BYTES
    # Where workers write the status files probes read (engine/ops/probe.py); "": a directory per
    # prefix under the system's temporary directory.
    status_dir: str = ""
    # Recycling (0: no limit): a worker retires after claiming this many jobs, above this
    # resident memory, or after this long; it stops claiming, lets its jobs finish within
    # shutdown_grace_s and exits 0, for its supervisor to start a fresh one.
    max_jobs: int = 0
    # Resident memory above which a worker retires (0: no limit).
    max_rss_mib: float = 0.0
    # How long a worker runs before it retires (0: no limit).
    max_age_s: float = 0.0
    # A job whose task version no worker serving its queue has is kept waiting for one; it is
    # dropped when no worker with that version was seen for this long (and it waited as long).
    unserved_drop_after_s: float = 3600.0
    # The Django settings WORKER_TIMEOUT and QUEUE_TIMEOUT: the timeout_s (longest run of an
    # attempt, then the error code TIMEOUT) and queue_timeout_s (longest wait in a queue, then
    # `expired`) of jobs whose task and call set none; None: no limit, since a global cap
    # changes jobs that never asked for one.
    worker_timeout_s: float | None = None
    # The second of the two above: the longest wait in a queue (Django: QUEUE_TIMEOUT).
    queue_timeout_s: float | None = None
    # Per queue, before the two above: (queue, worker_timeout_s, queue_timeout_s), None leaving
    # the global one; a mapping {queue: {"worker_timeout_s": .., "queue_timeout_s": ..}} works.
    queue_timeouts: tuple[tuple[str, float | None, float | None], ...] = ()
    # The groups of the fields above by owner, built and checked from them (not arguments).
    stream: StreamSettings = field(init=False, repr=False, compare=False)
    cleaner: CleanerSettings = field(init=False, repr=False, compare=False)
    shutdown: ShutdownSettings = field(init=False, repr=False, compare=False)
    recycle: RecycleSettings = field(init=False, repr=False, compare=False)
    job_log: JobLogSettings = field(init=False, repr=False, compare=False)
    replica: ReplicaAckSettings = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        groups = {
            "stream": StreamSettings(
                self.events_maxlen, self.events_group, self.events_kept_without_group
            ),
            "cleaner": CleanerSettings(
                self.cleaner_interval_s,
                self.cleaner_batch,
                self.dlq_max_age_s,
                self.dlq_max_len,
                self.unserved_drop_after_s,
            ),
            "shutdown": ShutdownSettings(self.shutdown_grace_s, self.shutdown_exit_s),
            "recycle": RecycleSettings(self.max_jobs, self.max_rss_mib, self.max_age_s),
            "job_log": JobLogSettings(self.job_log_max_lines, self.job_log_max_bytes),
            "replica": ReplicaAckSettings(self.replica_acks, self.replica_ack_timeout_ms),
        }
        for name, group in groups.items():
            object.__setattr__(self, name, group)
        if not self.prefix or any(c in self.prefix for c in "{}"):
            raise ConfigError(f"prefix must be non-empty without braces: {self.prefix!r}")
        _positive(
            "",
            max_payload_bytes=self.max_payload_bytes,
            lease_ms=self.lease_ms,
            claim_batch=self.claim_batch,
            isolation_processes=self.isolation_processes,
            chosen_id_ttl_s=self.chosen_id_ttl_s,
            checkpoint_max_bytes=self.checkpoint_max_bytes,
        )
        _not_negative("", min_repeat_interval_s=self.min_repeat_interval_s)
        if not isinstance(self.check_argument_types, bool):
            raise ConfigError(
                f"check_argument_types must be True or False, got {self.check_argument_types!r}"
            )
        object.__setattr__(self, "queue_timeouts", _queue_timeouts(self.queue_timeouts))
        for value in (
            self.worker_timeout_s,
            self.queue_timeout_s,
            *(t for _, *pair in self.queue_timeouts for t in pair),
        ):
            _check_timeout(value)
        if not self.heartbeat_interval_s > 0:
            raise ConfigError(
                f"heartbeat_interval_s must be positive, got {self.heartbeat_interval_s!r}"
            )
        if self.lease_ms < self.stale_floor_s * 1000:
            raise ConfigError(
                f"lease_ms ({self.lease_ms} ms) must be at least twice heartbeat_interval_s "
                f"({self.heartbeat_interval_s:g} s), {self.stale_floor_s * 1000:g} ms: a lease "
                "renewed every heartbeat would otherwise lapse after one late renewal"
            )
        if not 0.2 <= self.liveness_window_s <= self.lease_ms / 1000:
            raise ConfigError("liveness_window_s must be between 0.2 s and lease_ms")
        try:
            scheme = urlsplit(self.redis_url).scheme
        except ValueError as exc:
            raise ConfigError(f"redis_url {self.redacted_url!r} does not parse: {exc}") from None
        if scheme not in ("redis", "rediss", "unix", "redis+sentinel", *CLUSTER_SCHEMES):
            raise ConfigError(
                "redis_url must be redis://, rediss://, unix://, redis+sentinel:// or "
                f"redis+cluster:// (rediss+cluster://), got {scheme!r}"
            )

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> EngineSettings:
        """Build settings for a Redis URL, with any other field overridden."""
        return cls(redis_url=url, **overrides)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> EngineSettings:
        """Build settings from a mapping with lowercase or uppercase field names."""
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        kwargs = {k.lower(): v for k, v in values.items()}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(f"unknown engine settings: {', '.join(unknown)}")
        return cls(**kwargs)

    def worker_timeout_for(self, queue: str) -> float | None:
        """Return the timeout_s of a job of `queue` whose task and call set none."""
        for name, worker_s, _ in self.queue_timeouts:
            if name == queue and worker_s is not None:
                return worker_s
        return self.worker_timeout_s

    def queue_timeout_for(self, queue: str) -> float | None:
        """Return the queue_timeout_s of a job of `queue` whose task and call set none."""
        for name, _, queue_s in self.queue_timeouts:
            if name == queue and queue_s is not None:
                return queue_s
        return self.queue_timeout_s

    @property
    def stale_floor_s(self) -> float:
        """Return the shortest stale threshold a heartbeat allows: twice heartbeat_interval_s.

        A lease (lease_ms) and a task's max_heartbeat_interval_s are renewed by the worker's
        heartbeat; one shorter than two heartbeats lapses after a single late renewal.
        """
        return 2 * self.heartbeat_interval_s

    @property
    def redacted_url(self) -> str:
        """Return the Redis URL with its secrets replaced by *** (see `redact_url`)."""
        return redact_url(self.redis_url)

    def __repr__(self) -> str:
        return f"EngineSettings(redis_url={self.redacted_url!r}, prefix={self.prefix!r})"
