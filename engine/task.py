"""The @task decorator, TaskOptions, and the registry keyed by name and version."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import ModuleType
from typing import Any, Literal, overload

from . import serializer
from .backoff import Backoff, validate_backoff
from .errors import TIMEOUT_CODE, ConfigError, InvalidArguments, PayloadTooLarge, UnknownTask
from .job import OPTION_FIELDS, TERMINAL_STATES, Job, JobState
from .keys import check_chosen_job_id, new_job_id, validate_queue_name
from .limits import (
    Deduplication,
    FromArgs,
    check_limit,
    check_rate_policy,
    from_args,
    rate_interval_ms,
)
from .settings import DEFAULT_RESULT_TTL_S

DeadLetterPolicy = Literal["save", "none"]
ShutdownPolicy = Literal["stop", "resubmit", "continue"]
ParentFailurePolicy = Literal["wait", "fail", "cancel"]
# What a job does when its rate limit has no free slot (engine/limits.py RATE_LIMIT_POLICIES).
RateLimitPolicy = Literal["wait", "drop", "reschedule"]
# Which end of its parents releases a job: all completed, one failed, or any end.
RunsOn = Literal["success", "failure", "end"]
# A submit function for async code, and one for sync code.
AsyncSubmit = Callable[[Job], Awaitable[Job]]
SyncSubmit = Callable[[Job], Job]
# Where `Task.enqueue` and `Task.delay` send their job: the process's producer, which routes them
# to itself when imported (engine/producer.py; `import engine` imports it).
_routes: tuple[AsyncSubmit, SyncSubmit] | None = None


def route_submissions(async_submit: AsyncSubmit, sync_submit: SyncSubmit) -> None:
    """Send the jobs of `Task.enqueue` and `Task.delay` to these functions."""
    global _routes
    _routes = (async_submit, sync_submit)


def _routed() -> tuple[AsyncSubmit, SyncSubmit]:
    if _routes is None:
        raise ConfigError(
            "task.enqueue() and task.delay() need the engine imported (import engine)"
        )
    return _routes


@dataclass(frozen=True, slots=True)
class Callback:
    """A job submitted with another as its child: a task (or a task's name) and keyword
    arguments; it also gets `parent_id`, the id of the job it follows."""

    task: Task | str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, value: CallbackSpec, option: str = "callback") -> Callback:
        """Return `value` (a Callback, a Task, a task name, or (task, kwargs)) as a Callback;
        raise ConfigError for anything else."""
        if isinstance(value, Callback):
            return value
        kwargs: Any = {}
        if isinstance(value, tuple | list) and len(value) == 2:
            value, kwargs = value
        if not isinstance(value, Task | str) or not value:
            raise ConfigError(
                f"{option} takes a task, a task name or (task, kwargs), not {value!r}"
            )
        if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
            raise ConfigError(f"{option}: the kwargs must be a dict with string keys")
        if "parent_id" in kwargs:
            raise ConfigError(f"{option}: parent_id is given by the engine (the job's id)")
        return cls(value, dict(kwargs))

    def job(self, parent: Job, runs_on: RunsOn) -> Job:
        """Return the callback's job: a child of `parent` in its queue, released by `runs_on`
        (a success callback is cancelled when the parent ends otherwise)."""
        t = self.task if isinstance(self.task, Task) else task_ref(self.task)
        policy: ParentFailurePolicy = "cancel" if runs_on == "success" else "wait"
        child = t.using(
            queue=parent.queue,
            depends_on=[parent.id],
            runs_on=runs_on,
            on_parent_failure=policy,
            on_success=None,  # a callback's own callbacks: none (no chains, no loops)
            on_failure=None,
        )
        try:
            return child.call(**self.kwargs, parent_id=parent.id)
        except InvalidArguments as exc:
            raise InvalidArguments(f"{exc} (a callback is called with parent_id=)") from None


# What on_success and on_failure take: a Callback, a Task, a task name, or (task, kwargs).
type CallbackSpec = Callback | Task | str | tuple[Task | str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """Options of a task (docs/features.md); durations carry `_s`."""

    queue: str = "default"
    priority: int = 0
    max_retries: int = 3
    retry_delay_s: float | None = None
    backoff: Backoff = "exponential_jitter"
    max_retry_delay_s: float = 3600.0
    expected_exceptions: tuple[type[BaseException], ...] = ()
    retry_on: frozenset[str] = frozenset()
    no_retry_on: frozenset[str] = frozenset()
    timeout_s: float | None = None
    dead_letter_policy: DeadLetterPolicy = "save"
    result_ttl_s: int = DEFAULT_RESULT_TTL_S
    # Staleness from creation, absolute deadline (epoch seconds), most time waiting in a queue.
    ttl_s: float | None = None
    good_until: float | None = None
    queue_timeout_s: float | None = None
    # A started job whose task has not called heartbeat() for this long is stalled.
    max_heartbeat_interval_s: float | None = None
    max_stalls: int = 1
    # Once the grace after SIGTERM ran out: "resubmit" hands the job back to its queue without
    # using an attempt (as a crash does), "stop" ends it stalled, "continue" lets it finish.
    on_shutdown: ShutdownPolicy = "resubmit"
    # Simultaneous runs of this task per worker process (None: only the worker's concurrency).
    max_concurrent: int | None = None
    # Pass a JobContext as the first argument.
    takes_context: bool = False
    # What a parent's failure does to a job that depends on it.
    on_parent_failure: ParentFailurePolicy = "wait"
    # Which end of its parents releases a job that has some: "success" (each completed),
    # "failure" (a parent failed, stalled, expired or was dropped; one that completes or is
    # cancelled cancels it), "end" (whatever the end).
    runs_on: RunsOn = "success"
    # Jobs submitted with every job of the task, in the same step, as its children: one run
    # after it completes (else cancelled), one after it fails for good (else cancelled).
    on_success: CallbackSpec | None = None
    on_failure: CallbackSpec | None = None
    deduplication: Deduplication | None = None
    # Starts of this task per period, shared by every worker ("10/s", "600/m", (10, 1.0)).
    rate_limit: str | tuple[float, float] | None = None
    # Each value of the key (a string, or computed from the call's arguments) gets its own
    # rate_limit budget, in the job's queue; tasks giving the same key share its budget.
    rate_key: FromArgs | None = None
    # At the limit: "wait" for the slot, "drop" the job at submit (it ends `cancelled`, never
    # runs), or "reschedule" it at submit to its next free slot; the enqueue says which.
    on_rate_limit: RateLimitPolicy = "wait"
    # Jobs with the same key run at most concurrency_limit at once, across all workers; the
    # limit may also be computed from the arguments (a bigger one for some keys).
    concurrency_key: FromArgs | None = None
    concurrency_limit: int | Callable[..., int] = 1
    # At most this many jobs of this task run at once across every worker (a cluster-wide cap): a
    # concurrency key of the task's own, so it cannot go with a concurrency_key.
    max_running: int | None = None
    # Retention by final state: state -> seconds its hash is kept, 0 drops it at once; a state
    # named here ends outside the DLQ. Others keep result_ttl_s / the DLQ.
    cleanup_on: Mapping[str, float] | None = None
    # Enqueue a repeatable instead of one job: a run every this many seconds, repeat_limit
    # runs in all (None: until removed).
    repeat_every_s: float | None = None
    repeat_limit: int | None = None

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)
        _check_priority(self.priority)
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        for name in ("retry_delay_s", "timeout_s"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{name} must be >= 0, got {value}")
        if self.max_retry_delay_s < 0 or self.result_ttl_s <= 0:
            raise ConfigError("max_retry_delay_s must be >= 0 and result_ttl_s > 0")
        validate_backoff(self.backoff)
        for name in ("ttl_s", "queue_timeout_s", "max_heartbeat_interval_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be positive, got {value}")
        if self.max_stalls < 0:
            raise ConfigError(f"max_stalls must be >= 0, got {self.max_stalls}")
        if self.max_running is not None:
            check_limit(self.max_running)
            if self.concurrency_key is not None:
                raise ConfigError("max_running is a concurrency key of the task's own: give one")
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise ConfigError(f"max_concurrent must be >= 1, got {self.max_concurrent}")
        if self.on_shutdown not in ("stop", "resubmit", "continue"):
            raise ConfigError(
                f"on_shutdown must be stop, resubmit or continue, not {self.on_shutdown!r}"
            )
        if isinstance(self.good_until, datetime):
            object.__setattr__(self, "good_until", epoch_s(self.good_until))
        if self.dead_letter_policy not in ("save", "none"):
            raise ConfigError(
                f"dead_letter_policy must be 'save' or 'none', not {self.dead_letter_policy!r}"
            )
        if self.on_parent_failure not in ("wait", "fail", "cancel"):
            raise ConfigError(
                f"on_parent_failure must be wait, fail or cancel, not {self.on_parent_failure!r}"
            )
        if self.runs_on not in ("success", "failure", "end"):
            raise ConfigError(f"runs_on must be success, failure or end, not {self.runs_on!r}")
        for name in ("on_success", "on_failure"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Callback.of(value, name))
        if self.deduplication is not None:
            object.__setattr__(self, "deduplication", Deduplication.of(self.deduplication))
        if self.cleanup_on is not None:
            object.__setattr__(self, "cleanup_on", check_cleanup_on(self.cleanup_on))
        _check_repeat(self.repeat_every_s, self.repeat_limit)
        if self.rate_limit is not None:
            rate_interval_ms(self.rate_limit)
        check_rate_policy(self.on_rate_limit)
        if self.rate_limit is None and (self.rate_key is not None or self.on_rate_limit != "wait"):
            raise ConfigError("rate_key and on_rate_limit need a rate_limit (the task has none)")
        if self.rate_key is not None and not callable(self.rate_key):
            from_args(self.rate_key, "rate_key", (), {})
        if not callable(self.concurrency_limit):
            check_limit(self.concurrency_limit)
        object.__setattr__(self, "expected_exceptions", tuple(self.expected_exceptions))
        object.__setattr__(self, "retry_on", frozenset(self.retry_on))
        object.__setattr__(self, "no_retry_on", frozenset(self.no_retry_on))


@dataclass(frozen=True, slots=True)
class Schedule:
    """When and under which identity one call is enqueued."""

    delay_s: float | None = None
    run_at_ms: int | None = None
    job_id: str | None = None
    depends_on: tuple[str, ...] = ()


_LIMIT_OPTIONS = ("ttl_s", "good_until", "queue_timeout_s", "max_stalls")
_PRODUCER_OPTIONS = (
    "on_parent_failure",
    "runs_on",
    "on_success",
    "on_failure",
    "deduplication",
    "rate_limit",
    "rate_key",
    "on_rate_limit",
    "concurrency_key",
    "concurrency_limit",
    "max_running",
    "cleanup_on",
    "repeat_every_s",
    "repeat_limit",
)


# Every option `Task.using` takes besides its own parameters (what may change per call).
PER_CALL_OPTIONS: frozenset[str] = frozenset(
    ("queue", "priority", *OPTION_FIELDS, *_LIMIT_OPTIONS, *_PRODUCER_OPTIONS)
)


def check_cleanup_on(value: Mapping[str, float] | Iterable[str]) -> dict[str, float]:
    """Return cleanup_on as final state -> seconds (a list of states: 0 each); raise
    ConfigError for a state that is not final or a negative or non-number value."""
    if isinstance(value, str):
        raise ConfigError("cleanup_on takes {state: seconds} or a list of final states")
    pairs = value.items() if isinstance(value, Mapping) else ((s, 0) for s in value)
    out: dict[str, float] = {}
    finals = sorted(str(s) for s in TERMINAL_STATES)
    for state, seconds in pairs:
        if state not in finals:
            raise ConfigError(f"cleanup_on: {state!r} is not a final state ({', '.join(finals)})")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
            raise ConfigError(f"cleanup_on[{state!r}] must be seconds >= 0, got {seconds!r}")
        out[state] = seconds
    return out


def _check_repeat(every_s: float | None, limit: int | None) -> None:
    if every_s is not None and (
        isinstance(every_s, bool)
        or not isinstance(every_s, int | float)
        or not math.isfinite(every_s)
        or every_s <= 0
    ):
        raise ConfigError(f"repeat_every_s must be a positive number of seconds, got {every_s!r}")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"repeat_limit must be a whole number >= 1, got {limit!r}")
        if every_s is None:
            raise ConfigError("repeat_limit needs repeat_every_s (or a schedule)")


def epoch_s(when: datetime) -> float:
    """Return a timezone-aware datetime as epoch seconds."""
    if when.tzinfo is None:
        raise ConfigError("datetimes must be timezone-aware")
    return when.timestamp()


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


@functools.cache
def _is_async(fn: Callable[..., Any] | None) -> bool:
    return inspect.iscoroutinefunction(fn)


@functools.cache
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(fn)


@functools.cache
def positional_arity(fn: Callable[..., Any]) -> tuple[float, float]:
    """Return the fewest and most positional arguments `fn` binds with no keywords given.

    Binding is the check; this is its shortcut (`Signature.bind` is slow for a per-job cost): a
    call of that many positional arguments and no keywords binds. A keyword-only parameter without a
    default makes the range empty, so every call takes the full bind (and its error message).
    """
    fewest, most = 0.0, 0.0
    for param in _signature(fn).parameters.values():
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            most += 1
            fewest += param.default is param.empty
        elif param.kind is param.VAR_POSITIONAL:
            most = math.inf
        elif param.kind is param.KEYWORD_ONLY and param.default is param.empty:
            return (1.0, 0.0)
    return (fewest, most)


def bind_or_raise(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise TypeError (Signature.bind's) unless `args` and `kwargs` bind to `fn`."""
    if not kwargs:
        fewest, most = positional_arity(fn)
        if fewest <= len(args) <= most:
            return
    _signature(fn).bind(*args, **kwargs)


def _check_priority(priority: int) -> None:
    if isinstance(priority, bool) or not isinstance(priority, int) or not -100 <= priority <= 100:
        raise ConfigError(f"priority must be an integer from -100 to 100, got {priority!r}")


@dataclass(frozen=True, slots=True)
class Task:
    """A registered function with its options; `using()` returns a copy with overrides."""

    name: str
    version: int
    options: TaskOptions
    fn: Callable[..., Any] | None = None
    schedule: Schedule = Schedule()
    # JSON-able options given per call; stored on the job so the worker applies them.
    overrides: dict[str, Any] = field(default_factory=dict)
    # The option names its declaration gave (the rest are defaults).
    given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @property
    def key(self) -> tuple[str, int]:
        """Return the registry key (name, version)."""
        return (self.name, self.version)

    @property
    def is_async(self) -> bool:
        """Tell whether the function is a coroutine function."""
        return _is_async(self.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly, in-process."""
        if self.fn is None:
            raise UnknownTask(f"task {self.name!r} has no function in this process")
        return self.fn(*args, **kwargs)

    async def enqueue(self, *args: Any, **kwargs: Any) -> Job:
        """Submit a call of this task (engine/producer.py: the configured settings or the
        application's submit functions)."""
        return await _routed()[0](self.call(*args, **kwargs))

    def delay(self, *args: Any, **kwargs: Any) -> Job:
        """Submit a call of this task from sync code (see `enqueue`)."""
        return _routed()[1](self.call(*args, **kwargs))

    def using(
        self,
        *,
        delay_s: float | None = None,
        run_at: datetime | float | None = None,
        job_id: str | None = None,
        depends_on: Iterable[Job | str] | None = None,
        **options: Any,
    ) -> Task:
        """Return a copy with per-call options, a delay or run time, a job id, or parents."""
        options = _aliases(options)
        unknown = set(options) - PER_CALL_OPTIONS
        if unknown:
            raise ConfigError(f"unknown task options: {', '.join(sorted(unknown))}")
        if delay_s is not None and delay_s < 0:
            raise ConfigError(f"delay_s must be >= 0, got {delay_s}")
        if isinstance(run_at, datetime):
            run_at = epoch_s(run_at)
        run_at_ms = int(run_at * 1000) if run_at is not None else None
        new_options = dataclasses.replace(self.options, **options)
        overrides = {**self.overrides, **{k: v for k, v in options.items() if k in OPTION_FIELDS}}
        if callable(overrides.get("backoff")):
            raise ConfigError("a callable backoff cannot be sent with a job; set it on @task")
        schedule = Schedule(
            delay_s if delay_s is not None else self.schedule.delay_s,
            run_at_ms if run_at_ms is not None else self.schedule.run_at_ms,
            check_chosen_job_id(job_id) if job_id is not None else self.schedule.job_id,
            _parent_ids(depends_on) if depends_on is not None else self.schedule.depends_on,
        )
        return dataclasses.replace(
            self, options=new_options, schedule=schedule, overrides=overrides
        )

    def bind_check(self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> None:
        """Raise InvalidArguments unless the arguments bind to the function's signature."""
        if self.fn is None:
            return
        lead = (None,) if self.options.takes_context else ()
        try:
            bind_or_raise(self.fn, (*lead, *args), kwargs)
        except TypeError as exc:
            raise InvalidArguments(f"task {self.name!r}: {exc}") from None

    def call(self, *args: Any, **kwargs: Any) -> Job:
        """Return an unsubmitted Job for this call, checked against the signature."""
        self.bind_check(args, kwargs)
        opts = self.options
        job = Job(
            id=self.schedule.job_id or new_job_id(),
            generated_id=self.schedule.job_id is None,
            task=self.name,
            version=self.version,
            queue=self.options.queue,
            state=JobState.UNSUBMITTED,
            args=list(args),
            kwargs=kwargs,
            priority=self.options.priority,
            options=dict(self.overrides),
            sent_at_ms=int(time.time() * 1000),
            run_at_ms=self.schedule.run_at_ms,
            delay_ms=_ms(self.schedule.delay_s),
            dlq="0" if opts.dead_letter_policy == "none" else None,
            max_stalls=None if opts.max_stalls == 1 else opts.max_stalls,
            ttl_ms=_ms(opts.ttl_s),
            good_until_ms=_ms(opts.good_until),
            queue_timeout_ms=_ms(opts.queue_timeout_s),
            parents=list(self.schedule.depends_on),
            on_parent_failure=None if opts.on_parent_failure == "wait" else opts.on_parent_failure,
            runs_on=None if opts.runs_on == "success" else opts.runs_on,
            made_by=self,
        )
        if opts.on_success is not None:
            job.callbacks.append(Callback.of(opts.on_success).job(job, "success"))
        if opts.on_failure is not None:
            job.callbacks.append(Callback.of(opts.on_failure).job(job, "failure"))
        if opts.deduplication is not None:
            dedup = opts.deduplication
            job.dedup_id = from_args(dedup.id, "deduplication id", args, kwargs)
            job.dedup_mode = dedup.mode
            job.dedup_ttl_ms = 0 if dedup.ttl_s is None else max(1, math.ceil(dedup.ttl_s * 1000))
        if opts.max_running is not None:
            job.concurrency_key, job.concurrency_limit = f"task:{self.name}", opts.max_running
        elif opts.concurrency_key is not None:
            job.concurrency_key = from_args(opts.concurrency_key, "concurrency_key", args, kwargs)
            limit = opts.concurrency_limit
            job.concurrency_limit = check_limit(
                limit(*args, **kwargs) if callable(limit) else limit
            )
        if opts.rate_limit is not None:
            job.rate_interval_ms = rate_interval_ms(opts.rate_limit)
            if opts.rate_key is not None:
                job.rate_key = from_args(opts.rate_key, "rate_key", args, kwargs)
            if opts.on_rate_limit != "wait":
                job.on_rate_limit = opts.on_rate_limit
        if opts.cleanup_on:
            ms = {state: int(s * 1000) for state, s in opts.cleanup_on.items()}
            job.cleanup_ms = serializer.dumps(ms).decode()
        job.repeat_every_s, job.repeat_limit = opts.repeat_every_s, opts.repeat_limit
        return job


def _aliases(options: dict[str, Any]) -> dict[str, Any]:
    """Return `options` with the shorthand options spelled out: `debounce={id, ttl}` is
    `deduplication={id, ttl, mode: "debounce"}`, `repeat_every` is `repeat_every_s`."""
    if "repeat_every" in options:
        if "repeat_every_s" in options:
            raise ConfigError("give repeat_every or repeat_every_s, not both")
        options = {**options, "repeat_every_s": options["repeat_every"]}
        del options["repeat_every"]
    if "debounce" not in options:
        return options
    if "deduplication" in options:
        raise ConfigError("give debounce or deduplication, not both")
    value = options["debounce"]
    if not isinstance(value, Mapping) or value.get("mode", "debounce") != "debounce":
        raise ConfigError("debounce takes {id, ttl}: deduplication with mode 'debounce'")
    rest = {k: v for k, v in options.items() if k != "debounce"}
    return {**rest, "deduplication": {**value, "mode": "debounce"}}


def _parent_ids(parents: Iterable[Job | str]) -> tuple[str, ...]:
    ids = [p.id if isinstance(p, Job) else p for p in parents]
    for parent in ids:
        if not isinstance(parent, str) or not parent:
            raise ConfigError(f"depends_on takes jobs or job ids, got {parent!r}")
    return tuple(dict.fromkeys(ids))


@overload
def task(
    fn: Callable[..., Any], *, name: str | None = None, version: int = 1, **options: Any
) -> Task: ...


@overload
def task(
    fn: None = None, *, name: str | None = None, version: int = 1, **options: Any
) -> Callable[[Callable[..., Any]], Task]: ...


def task(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    version: int = 1,
    **options: Any,
) -> Task | Callable[[Callable[..., Any]], Task]:
    """Declare a task: `@task` or `@task(name=..., version=..., queue=..., max_retries=...)`."""

    def wrap(f: Callable[..., Any]) -> Task:
        given = _aliases(options)
        return Task(
            name=name or f"{f.__module__}.{f.__qualname__}",
            version=version,
            options=TaskOptions(**given),
            fn=f,
            given=frozenset(given),
        )

    return wrap(fn) if fn is not None else wrap


_RETRY_NAMES = frozenset({"Retry", "RetryableError"})


def _names(code: Any) -> set[str]:
    """Return the global and attribute names `code` and the functions inside it use."""
    found = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            found |= _names(const)
    return found


def unused_retries(task: Task) -> str | None:
    """Return why a task's declared max_retries can never be used, or None.

    A failure is retried only when its exception is in expected_exceptions, is a Retry, or is
    a RetryableError whose code retry_on admits: a task that declares max_retries and none of
    those (its code names neither Retry nor RetryableError) fails at its first error.
    """
    opts = task.options
    if "max_retries" not in task.given or opts.max_retries <= 0:
        return None
    if opts.expected_exceptions or opts.retry_on:
        return None
    if opts.timeout_s is not None and TIMEOUT_CODE not in opts.no_retry_on:
        return None  # a timeout is retried
    fn = getattr(task.fn, "__wrapped__", task.fn)
    code = getattr(fn, "__code__", None)
    if code is None or _names(code) & _RETRY_NAMES:
        return None
    return (
        f"task {task.name!r} sets max_retries={opts.max_retries}, but nothing it raises is "
        "retried: only exceptions in expected_exceptions, Retry and RetryableError are"
    )


def task_ref(name: str, version: int = 1, **options: Any) -> Task:
    """Return a Task for a function that lives in another process (enqueue by name)."""
    return Task(name=name, version=version, options=TaskOptions(**_aliases(options)))


class Registry:
    """Tasks a worker can run, keyed by (name, version)."""

    def __init__(self, tasks: Iterable[Task] = ()) -> None:
        self._tasks: dict[tuple[str, int], Task] = {}
        for t in tasks:
            self.add(t)

    def add(self, t: Task) -> None:
        """Register `t`; a second function under the same key is an error."""
        if t.fn is None:
            raise ConfigError(f"task {t.name!r} has no function to run")
        old = self._tasks.get(t.key)
        if old is not None and old.fn is not t.fn:
            raise ConfigError(f"two functions registered as {t.name!r} version {t.version}")
        self._tasks[t.key] = t

    def get(self, name: str, version: int) -> Task | None:
        """Return the task for a name and version, or None."""
        return self._tasks.get((name, version))

    def __iter__(self) -> Any:
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)


def collect_tasks(module: ModuleType) -> list[Task]:
    """Return every Task defined at the top level of `module`."""
    return [v for v in vars(module).values() if isinstance(v, Task) and v.fn is not None]


def json_args(job: Job, limit_bytes: int) -> tuple[bytes, bytes]:
    """Encode a job's args and kwargs, enforcing the payload limit on their sum."""
    args = serializer.dumps(job.args)
    kwargs = serializer.dumps(job.kwargs)
    size = len(args) + len(kwargs)
    if size > limit_bytes:
        raise PayloadTooLarge(size, limit_bytes)
    return args, kwargs
