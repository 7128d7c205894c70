"""A task's arguments against its signature's type hints: the API's schema, and the check the
submission gate runs (every API submission; every other door with CHECK_ARGUMENT_TYPES)."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from engine import ConfigError, Job, Task


class ArgumentTypeError(ConfigError):
    """An argument does not match its task's type hint (the API answers 422)."""


def _hints(task: Task) -> dict[str, Any]:
    """Return the task function's resolved type hints by parameter name ({} if unresolvable)."""
    fn = getattr(task.fn, "__wrapped__", task.fn)
    try:
        return typing.get_type_hints(fn)
    except Exception:  # an annotation naming something the module never imported
        return {}


def _params(task: Task) -> list[inspect.Parameter]:
    """Return the parameters a caller passes (the job context, if taken, left out)."""
    params = list(inspect.signature(task.fn).parameters.values()) if task.fn else []
    return params[1:] if task.options.takes_context else params


def _adapter(hint: Any) -> TypeAdapter[Any] | None:
    try:
        return TypeAdapter(hint)
    except Exception:  # a type pydantic cannot describe: left unchecked
        return None


def schema(task: Task) -> dict[str, Any]:
    """Return the JSON Schema of the task's keyword arguments."""
    if task.fn is None:
        return {"type": "object"}
    hints = _hints(task)
    props: dict[str, Any] = {}
    required: list[str] = []
    for p in _params(task):
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        adapter = _adapter(hints[p.name]) if p.name in hints else None
        try:
            props[p.name] = adapter.json_schema() if adapter else {}
        except Exception:  # e.g. a callable type: no JSON Schema for it
            props[p.name] = {}
        if p.default is p.empty:
            required.append(p.name)
    return {"type": "object", "properties": props, "required": required}


def check_types(task: Task, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Raise ArgumentTypeError naming the first argument that does not match its type hint.

    Values are checked as the JSON they travel as, strictly ("5" is not an int). Arguments that
    do not bind are left to the task's own signature check.
    """
    if task.fn is None:
        return
    params = _params(task)
    try:
        bound = inspect.Signature(params).bind(*args, **kwargs)
    except TypeError:
        return
    hints = _hints(task)
    for p in params:
        if p.name not in bound.arguments or p.name not in hints:
            continue
        adapter = _adapter(hints[p.name])
        if adapter is None:
            continue
        value = bound.arguments[p.name]
        values = (
            list(value)
            if p.kind is p.VAR_POSITIONAL
            else list(value.values())
            if p.kind is p.VAR_KEYWORD
            else [value]
        )
        for item in values:
            try:
                adapter.validate_json(orjson.dumps(item), strict=True)
            except ValidationError as exc:
                problem = exc.errors()[0]["msg"]
                raise ArgumentTypeError(
                    f"task {task.name!r}: argument {p.name!r}: {problem}"
                ) from None
            except orjson.JSONEncodeError:
                return  # not JSON at all: the engine's serializer names it


def check_job(tasks: dict[str, Task], job: Job) -> None:
    """Check a job's arguments against its task among `tasks` (one not among them: unchecked)."""
    task = tasks.get(job.task)
    if task is not None:
        check_types(task, list(job.args), dict(job.kwargs))
