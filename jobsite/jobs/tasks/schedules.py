"""JOBSITE["SCHEDULES"]: repeatables declared in settings, checked and turned into engine ones.

One entry: {"name": "nightly-report", "task": "myapp.tasks.report", "cron": "0 3 * * *",
"tz": "Europe/Paris", "args": [...], "kwargs": {...}, "queue": "default",
"skip_if_running": True, "tolerance_s": 600}, or "every_s": 60 instead of "cron" (tolerance_s:
how late a tick may fire or start before its health says so, docs/django.md). `runworker` syncs
them to Redis before its worker starts (engine.sync_declared); `manage.py check` reports bad
ones (E005).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from engine import (
    ConfigError,
    EngineError,
    Job,
    Repeatable,
    SyncReport,
    Task,
    check_arguments,
    declared_repeatable,
    serializer,
    sync_declared,
)
from jobsite.jobs import conf
from jobsite.jobs.tasks.registry import known_tasks

log = logging.getLogger("jobsite.schedules")

ENTRY_KEYS = frozenset(
    (
        "name",
        "task",
        "cron",
        "every_s",
        "tz",
        "args",
        "kwargs",
        "queue",
        "skip_if_running",
        "tolerance_s",
    )
)


def _plain_json(value: Any, what: str) -> None:
    """Raise ConfigError unless `value` is plain JSON (it reads back equal)."""
    try:
        same = serializer.loads(serializer.dumps(value)) == value
    except EngineError:
        same = False
    if not same:
        raise ConfigError(
            f"{what} must be plain JSON (lists, dicts with string keys, strings, numbers, "
            f"booleans, None), got {value!r}"
        )


def _job_of(entry: dict[str, Any], tasks: dict[str, Task]) -> Job:
    """Return the job each tick submits: the task's call, as the backends build it."""
    name = entry["task"]
    task = tasks.get(name) if isinstance(name, str) else None
    if task is None:
        raise ConfigError(
            f"unknown task {name!r}: not an engine or django.tasks task of "
            "JOBSITE['TASK_MODULES'] (django.tasks ones are named by module path)"
        )
    args, kwargs = entry.get("args", []), entry.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ConfigError("args must be a list and kwargs a dict")
    _plain_json(args, "args")
    _plain_json(kwargs, "kwargs")
    if "queue" in entry:
        conf.check_queue(entry["queue"])
        task = task.using(queue=entry["queue"])
    else:
        conf.check_queue(task.options.queue)
    return task.call(*args, **kwargs)


def runtime_job(task_name: str, args: list[Any], kwargs: dict[str, Any], queue: str | None) -> Job:
    """Return the job a schedule made at run time submits; ConfigError says what is wrong.

    The checks of a declared entry (known task, plain JSON, a served queue, arguments that
    bind), then the arguments against the task's type hints, as the API's submit checks them.
    """
    tasks = known_tasks()
    entry: dict[str, Any] = {"task": task_name, "args": args, "kwargs": kwargs}
    if queue is not None:
        entry["queue"] = queue
    try:
        job = _job_of(entry, tasks)
        check_arguments(tasks[task_name], args, kwargs)
    except ConfigError:
        raise
    except EngineError as exc:  # arguments that do not bind
        raise ConfigError(str(exc)) from None
    return job


def build(entry: Any, tasks: dict[str, Task], limit_bytes: int) -> Repeatable:
    """Return the declared repeatable of one SCHEDULES entry; ConfigError says what is wrong."""
    if not isinstance(entry, dict):
        raise ConfigError(f"an entry must be a dict, got {entry!r}")
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown:
        raise ConfigError(f"unknown keys {unknown}; an entry takes {sorted(ENTRY_KEYS)}")
    for key in ("name", "task"):
        if key not in entry:
            raise ConfigError(f"{key!r} is required")
    if ("cron" in entry) == ("every_s" in entry):
        raise ConfigError("give exactly one of 'cron' and 'every_s'")
    if isinstance(entry.get("every_s"), bool):
        raise ConfigError(f"every_s must be a number of seconds, got {entry['every_s']!r}")
    skip = entry.get("skip_if_running", False)
    if not isinstance(skip, bool):
        raise ConfigError(f"skip_if_running must be True or False, got {skip!r}")
    try:
        return declared_repeatable(
            entry["name"],
            _job_of(entry, tasks),
            limit_bytes=limit_bytes,
            every_s=entry.get("every_s"),
            cron=entry.get("cron"),
            tz=entry.get("tz", "UTC"),
            skip_if_running=skip,
            tolerance_s=entry.get("tolerance_s"),
        )
    except ConfigError:
        raise
    except EngineError as exc:  # arguments that do not bind, a payload over the limit...
        raise ConfigError(str(exc)) from None


def _label(index: int, entry: Any) -> str:
    name = entry.get("name") if isinstance(entry, dict) else None
    return f"JOBSITE['SCHEDULES'][{index}]" + (f" ({name!r})" if name is not None else "")


def _build_all(entries: Any) -> tuple[list[Repeatable], list[str]]:
    """Return the declared repeatables of `entries` and a message per problem."""
    if not isinstance(entries, list | tuple):
        return [], [f"JOBSITE['SCHEDULES'] must be a list of dicts, got {entries!r}"]
    tasks = known_tasks()
    limit_bytes = conf.engine_settings().max_payload_bytes
    reps: list[Repeatable] = []
    problems: list[str] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        try:
            rep = build(entry, tasks, limit_bytes)
        except ConfigError as exc:
            problems.append(f"{_label(index, entry)}: {exc}")
            continue
        if rep.name in seen:
            problems.append(f"{_label(index, entry)}: the name is used by an earlier entry")
        seen.add(rep.name)
        reps.append(rep)
    return reps, problems


def problems() -> list[str]:
    """Return what is wrong with JOBSITE["SCHEDULES"], one message per problem."""
    return _build_all(conf.option("SCHEDULES"))[1]


def declared() -> list[Repeatable]:
    """Return the repeatables JOBSITE["SCHEDULES"] declares; ConfigError lists every problem."""
    reps, found = _build_all(conf.option("SCHEDULES"))
    if found:
        raise ConfigError("; ".join(found))
    return reps


async def sync(reps: list[Repeatable], queues: Iterable[str] = ()) -> SyncReport:
    """Make Redis hold exactly the declared `reps` (see engine.sync_declared); log the counts."""
    from jobsite.jobs import services  # services imports the registry, which imports the backends

    names = [*conf.queues(), *queues]
    report = await services.arun_engine(
        lambda c: sync_declared(c.settings, c.redis, reps, queues=names)
    )
    log.info(
        "schedules synced declared=%d created=%d updated=%d removed=%d kept_overrides=%d",
        len(reps),
        report.created,
        report.updated,
        report.removed,
        report.kept_overrides,
    )
    for rep in reps:
        when = f"every_s={rep.every_s:g}" if rep.every_s is not None else f"cron='{rep.cron}'"
        log.info("schedule declared queue=%s name=%s %s tz=%s", rep.queue, rep.name, when, rep.tz)
    return report
