"""Exceptions raised by the engine, and the table mapping script return codes onto them."""

from __future__ import annotations

from enum import IntEnum


class EngineError(Exception):
    """Base class of every error the engine raises."""


class ConfigError(EngineError, ValueError):
    """A setting or task option is invalid."""


class SerializationError(EngineError, TypeError):
    """A payload or result is not JSON."""


class PayloadTooLarge(SerializationError):
    """A payload exceeds `EngineSettings.max_payload_bytes`."""

    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(f"payload is {size_bytes} bytes, over the limit of {limit_bytes} bytes")
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class CheckpointTooLarge(SerializationError):
    """A task's checkpoint exceeds `EngineSettings.checkpoint_max_bytes`; nothing was saved."""

    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"checkpoint is {size_bytes} bytes of JSON, over checkpoint_max_bytes "
            f"({limit_bytes} bytes); nothing was saved: keep where to resume (a row number, "
            "a cursor, ids), not the data itself"
        )
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class InvalidArguments(EngineError, TypeError):
    """The arguments do not bind to the task function's signature."""


class ArgumentTypeError(ConfigError):
    """An argument does not match its task's type hint (check_argument_types); nothing was
    submitted. The Django API answers 422 with its message."""


class UnknownTask(EngineError, LookupError):
    """No task is registered under that name and version."""


class RedisUnavailable(EngineError, ConnectionError):
    """Redis could not be reached in time."""


class RedisRefused(RedisUnavailable):
    """Redis answered but refuses for now (`reason` is the reply's first word, e.g. OOM)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ReplicaAckTimeout(RedisRefused):
    """Fewer replicas than `replica_acks` acknowledged a write within `replica_ack_timeout_ms`.

    The master made the write: it may yet reach the replicas, or die with the master in a
    failover. Its outcome is as unknown as after a lost reply, and it is retried the same way
    (a refusal, reason NOREPLICAS: the caller keeps the work and backs off).
    """

    def __init__(
        self, acked: int, wanted: int, timeout_ms: int, url: str, detail: str = ""
    ) -> None:
        super().__init__(
            "NOREPLICAS",
            f"Redis at {url}: {acked} of {wanted} replicas acknowledged the write within "
            f"{timeout_ms} ms{detail}",
        )
        self.acked = acked
        self.wanted = wanted
        # What the master answered the call (its script's reply), for a caller that retries.
        self.reply: object = None


class JobTimeout(EngineError, TimeoutError):
    """A wait for a job's terminal state timed out."""


class JobNotFound(EngineError, LookupError):
    """No job has this id (never "pending")."""


class LeaseLost(EngineError):
    """The job's lease token changed: another worker owns it now."""


class WrongState(EngineError):
    """The job is not in a state this transition accepts."""


# The error code of an attempt that ran past its timeout_s (retry_on / no_retry_on name it).
TIMEOUT_CODE = "TIMEOUT"


class _IdsRefused(EngineError):
    """Job ids a submission could not have; `ids` lists them."""

    def __init__(self, message: str, ids: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.ids = ids


class DuplicateJob(_IdsRefused):
    """A job with this id already exists in the queue."""


class JobIdTaken(_IdsRefused):
    """A chosen job id belongs to a job of another queue: ids are unique across queues."""


class UnknownParent(ConfigError, LookupError):
    """A job depends on a job id that does not exist in its queue."""


class Retry(Exception):
    """Raise from a task to retry it, optionally after `delay_s` seconds."""

    def __init__(self, delay_s: float | None = None, message: str = "") -> None:
        super().__init__(message or f"retry requested (delay_s={delay_s})")
        self.delay_s = delay_s


class RetryableError(Exception):
    """Raise from a task with an error `code`; `retry_on` and `no_retry_on` decide a retry."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


class Code(IntEnum):
    """What a script did to one job: 0 done, a negative code why not.

    The Lua headers say these with the phrases of `PHRASES` ("-2 lease lost"), which a test
    reads; positive codes are each script's own (its header says which).
    """

    OK = 0
    NOT_FOUND = -1
    LEASE_LOST = -2  # the job's token differs: another worker holds it now
    WRONG_STATE = -3
    DUPLICATE_ID = -4
    UNKNOWN_PARENT = -5


# How the Lua headers name each negative code (the state a WRONG_STATE names varies).
PHRASES: dict[Code, tuple[str, ...]] = {
    Code.NOT_FOUND: ("not found",),
    Code.LEASE_LOST: ("lease lost", "when the token no longer matches"),
    Code.WRONG_STATE: (
        "not started",
        "terminal",
        "not terminal",
        "not in a resubmittable state",
        "not scheduled",
    ),
    Code.DUPLICATE_ID: ("duplicate id",),
    Code.UNKNOWN_PARENT: ("unknown parent id",),
}

SCRIPT_ERRORS: dict[Code, type[EngineError]] = {
    Code.NOT_FOUND: JobNotFound,
    Code.LEASE_LOST: LeaseLost,
    Code.WRONG_STATE: WrongState,
    Code.DUPLICATE_ID: DuplicateJob,
    Code.UNKNOWN_PARENT: UnknownParent,
}


def error_for(code: int, job_id: str) -> EngineError:
    """Return the exception for a negative script code."""
    kind = SCRIPT_ERRORS.get(Code(code), EngineError) if code in Code else EngineError
    return kind(f"job {job_id}: script returned {code}")


class LoopCrashed(EngineError):
    """A loop of the worker died of a bug; the process must stop (its cause is chained)."""
