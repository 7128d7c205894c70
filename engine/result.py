"""Ok and err as values: `TaskResult`, what a task may return to fail without raising; `Ok` and
`Err`, how a caller learns how a job ended without catching (`jobs.outcome`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NoReturn

from .errors import EngineError, WrongState
from .job import TERMINAL_STATES, Job, JobState


@dataclass(frozen=True, slots=True)
class TaskResult:
    """Return `TaskResult.ok(value)` or `TaskResult.err(code, message)` from a task."""

    value: Any = None
    error_code: str | None = None
    message: str = ""

    @classmethod
    def ok(cls, value: Any = None) -> TaskResult:
        """Return a successful result carrying `value`."""
        return cls(value=value)

    @classmethod
    def err(cls, code: str, message: str = "") -> TaskResult:
        """Return a failure with an error code; the job ends `failed`."""
        return cls(error_code=code, message=message or code)

    @property
    def is_ok(self) -> bool:
        """Tell whether this is a success."""
        return self.error_code is None


@dataclass(frozen=True, slots=True)
class JobError:
    """How a job ended other than completed: its newest error in brief (no traceback)."""

    job_id: str
    # The terminal state: failed, cancelled, stalled, dropped or expired.
    state: str
    # The exception's class name (ValueError), or what ended the job (Timeout, Cancelled,
    # Stalled, TaskResult.err); the state's own name when no error was recorded.
    type: str
    message: str
    # The error code of a RetryableError, a TaskResult.err or a timeout (TIMEOUT), if any.
    code: str | None = None
    # The exception's dotted path (builtins.ValueError); None when nothing was raised.
    exception: str | None = None

    def __str__(self) -> str:
        return f"job {self.job_id} {self.state}: {self.type}: {self.message}"


class JobFailed(EngineError):
    """A job ended other than completed (what `Err.unwrap()` and `jobs.result()` raise);
    `error` says how."""

    def __init__(self, error: JobError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True, slots=True)
class Ok:
    """A job that completed, with the value its task returned."""

    value: Any
    ok: ClassVar[Literal[True]] = True
    error: ClassVar[None] = None

    def unwrap(self) -> Any:
        """Return the value."""
        return self.value


@dataclass(frozen=True, slots=True)
class Err:
    """A job that ended other than completed, with how (`JobError`)."""

    error: JobError
    ok: ClassVar[Literal[False]] = False
    value: ClassVar[None] = None

    def unwrap(self) -> NoReturn:
        """Raise JobFailed with the error, as `jobs.result()` does."""
        raise JobFailed(self.error)


def outcome_of(
    job_id: str, state: str, result: Any, errors: Sequence[Mapping[str, Any]]
) -> Ok | Err:
    """Return how an ended job ended: Ok(result) if it completed, else Err of its newest error
    record (`errors`, oldest first); WrongState for a job that has not ended."""
    if state == JobState.COMPLETED:
        return Ok(result)
    if state not in TERMINAL_STATES:
        raise WrongState(f"job {job_id} is {state}: it has not ended")
    last = next((e for e in reversed(errors) if isinstance(e, Mapping)), None)
    if last is None:
        return Err(JobError(job_id, str(state), str(state).capitalize(), f"job ended {state}"))
    return Err(
        JobError(
            job_id,
            str(state),
            str(last.get("type") or str(state).capitalize()),
            str(last.get("message") or ""),
            code=last.get("code"),
            exception=last.get("exception"),
        )
    )


def outcome(job: Job) -> Ok | Err:
    """Return how an ended job ended (see `outcome_of`)."""
    return outcome_of(job.id, job.state, job.result, job.errors)
