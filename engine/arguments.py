"""A job's arguments against its task's type hints, and the JSON Schema they make.

The check is opt-in (`EngineSettings.check_argument_types`; the Django API always runs it). Each
value is checked as the JSON it travels as, strictly: `"5"` is not an `int`. pydantic does the
checking; it is imported on first use, so a process that never checks never loads it. A task's
hints and their validators are built once per function.
"""

from __future__ import annotations

import inspect
import reprlib
import types
import typing
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from . import serializer
from .errors import ArgumentTypeError, SerializationError
from .job import Job
from .task import Task

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError

# How a value a caller gave is shown in an error: short, whatever its size.
_SHORT = reprlib.Repr(maxstring=40, maxother=40, maxlist=4, maxdict=4)


@dataclass(frozen=True, slots=True)
class _Param:
    """One parameter a caller passes, with its type hint and the validator built from it."""

    parameter: inspect.Parameter
    # The resolved hint (None: the parameter has none, or it could not be resolved).
    hint: Any
    # None: no hint, or a type pydantic cannot describe; the parameter goes unchecked.
    adapter: TypeAdapter[Any] | None


@dataclass(frozen=True, slots=True)
class _Signature:
    """A task function's parameters as a caller sees them (the job context left out)."""

    signature: inspect.Signature
    params: tuple[_Param, ...]


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Return the function's resolved type hints by parameter name ({} if unresolvable)."""
    try:
        return typing.get_type_hints(getattr(fn, "__wrapped__", fn))
    except Exception:  # an annotation naming something the module never imported
        return {}


def _adapter(hint: Any) -> TypeAdapter[Any] | None:
    """Return the validator of a type hint (None: a type pydantic cannot describe)."""
    from pydantic import TypeAdapter

    try:
        return TypeAdapter(hint)
    except Exception:  # a type pydantic cannot describe: left unchecked
        return None


@lru_cache(maxsize=1024)
def _signature(fn: Callable[..., Any], takes_context: bool) -> _Signature:
    """Return the parameters of `fn` a caller passes, each with its hint and validator."""
    parameters = list(inspect.signature(fn).parameters.values())
    if takes_context:
        parameters = parameters[1:]
    hints = _hints(fn)
    params = tuple(
        _Param(p, hints.get(p.name), _adapter(hints[p.name]) if p.name in hints else None)
        for p in parameters
    )
    return _Signature(inspect.Signature(parameters), params)


def _signature_of(task: Task) -> _Signature:
    """Return the task's parameters (built once per function, unless it cannot be a key)."""
    assert task.fn is not None
    takes_context = task.options.takes_context
    if isinstance(task.fn, Hashable):
        return _signature(task.fn, takes_context)
    return _signature.__wrapped__(task.fn, takes_context)


def _expected(hint: Any) -> str:
    """Return how a type hint reads in an error (`int`, `list[int]`, `str | None`)."""
    if isinstance(hint, type):
        return hint.__qualname__
    return repr(hint).replace("typing.", "")


def _choices(hint: Any) -> bool:
    """Tell whether a hint is a union of two types or more (None aside): pydantic then reports
    one error per type, each located under the type's name."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return False
    return sum(arg is not type(None) for arg in typing.get_args(hint)) > 1


def _refusal(task: str, name: str, param: _Param, value: Any, exc: ValidationError) -> str:
    """Return the error of one argument: the task, the argument, what was expected and given."""
    first = exc.errors()[0]
    where, problem = "".join(f"[{part!r}]" for part in first["loc"]), first["msg"]
    if _choices(param.hint):  # not the first type's complaint: the expected types say it
        where, problem = "", "Input should match one of the types"
    given = f"{type(value).__name__} {_SHORT.repr(value)}"
    return (
        f"task {task!r}: argument {name!r}{where}: {problem} "
        f"(expected {_expected(param.hint)}, given {given})"
    )


def check_arguments(task: Task, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Raise ArgumentTypeError naming the first argument that does not match its type hint.

    Arguments that do not bind are left to the signature check (`Task.call`), values that are
    not JSON to the payload check, a task without a function here to its worker.
    """
    if task.fn is None:
        return
    from pydantic import ValidationError

    sig = _signature_of(task)
    try:
        bound = sig.signature.bind(*args, **kwargs).arguments
    except TypeError:
        return
    for param in sig.params:
        p = param.parameter
        if param.adapter is None or p.name not in bound:
            continue
        value = bound[p.name]
        if p.kind is p.VAR_POSITIONAL:
            values = list(value)
        elif p.kind is p.VAR_KEYWORD:
            values = list(value.values())
        else:
            values = [value]
        for item in values:
            try:
                param.adapter.validate_json(serializer.dumps(item), strict=True)
            except SerializationError:
                return
            except ValidationError as exc:
                raise ArgumentTypeError(_refusal(task.name, p.name, param, item, exc)) from None


def check_job_arguments(job: Job, tasks: Mapping[str, Task] | None = None) -> None:
    """Check a job's arguments against the task whose `call()` made it, else against its task
    by name among `tasks`; a job of neither goes unchecked (see `check_arguments`)."""
    task = job.made_by if isinstance(job.made_by, Task) else None
    if (task is None or task.fn is None) and tasks is not None:
        task = tasks.get(job.task, task)
    if task is not None:
        check_arguments(task, job.args, job.kwargs)


def argument_schema(task: Task) -> dict[str, Any]:
    """Return the JSON Schema of the task's arguments, by name (its keyword arguments)."""
    if task.fn is None:
        return {"type": "object"}
    props: dict[str, Any] = {}
    required: list[str] = []
    for param in _signature_of(task).params:
        p = param.parameter
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        try:
            props[p.name] = param.adapter.json_schema() if param.adapter else {}
        except Exception:  # e.g. a callable type: no JSON Schema for it
            props[p.name] = {}
        if p.default is p.empty:
            required.append(p.name)
    return {"type": "object", "properties": props, "required": required}
