"""Argument types checked at the engine's one enqueue door, when check_argument_types is on:
every way in refuses a mistyped call, naming it, before anything is written."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from engine import (
    ArgumentTypeError,
    Client,
    EngineSettings,
    JobState,
    SyncClient,
    argument_schema,
    check_arguments,
    check_job_arguments,
    configure,
    producer,
    task,
    task_ref,
)
from engine.cli import parse_overrides

from . import tasks as t
from .helpers import dbsize


@task(name="typed")
async def typed(
    n: int,
    tags: list[str],
    *more: float,
    note: str | None = None,
    size: int | str = 0,
    **extra: bool,
) -> int:
    return n


@pytest.fixture
def checked(settings: EngineSettings) -> EngineSettings:
    return dataclasses.replace(settings, check_argument_types=True)


@pytest.fixture
def configured(checked: EngineSettings) -> Iterator[EngineSettings]:
    saved = (producer._settings, producer._installed)
    configure(checked)
    yield checked
    producer._settings, producer._installed = saved


MISTYPED = (
    r"task 'add': argument 'b': Input should be a valid integer \(expected int, given str '2'\)"
)


async def test_every_door_refuses_a_mistyped_call_and_writes_nothing(
    checked: EngineSettings, configured: EngineSettings
) -> None:
    good, bad = t.add.call(1, 1), t.add.call(1, "2")
    chosen = t.add.using(job_id="order-1")  # a chosen id is reserved first: not even that
    async with Client(checked) as client:
        doors: dict[str, Any] = {
            "enqueue": lambda: client.enqueue(t.add, 1, "2"),
            "enqueue_many": lambda: client.enqueue_many([good, bad]),
            "enqueue_flow": lambda: client.enqueue_flow(
                [good, t.add.using(depends_on=[good]).call(1, "2")]
            ),
            "chosen id": lambda: client.enqueue(chosen, 1, "2"),
            "callback": lambda: client.enqueue(t.add.using(on_success=t.after), 1, "2"),
            "repeating job": lambda: client.enqueue(t.add.using(repeat_every_s=60), 1, "2"),
            "repeatable": lambda: client.repeats.add("r", t.add.call(1, "2"), every_s=60),
            "task.enqueue": lambda: t.add.enqueue(1, "2"),
            "task.delay": lambda: asyncio.to_thread(t.add.delay, 1, "2"),
        }
        for door, call in doors.items():
            with pytest.raises(ArgumentTypeError, match=MISTYPED):
                await call()
            assert dbsize(checked) == 0, door
    with SyncClient(checked) as sync:
        for send in (lambda: sync.enqueue(t.add, 1, "2"), lambda: sync.enqueue_many([good, bad])):
            with pytest.raises(ArgumentTypeError, match=MISTYPED):
                await asyncio.to_thread(send)
    assert dbsize(checked) == 0


async def test_well_typed_calls_go_through(checked: EngineSettings) -> None:
    async with Client(checked) as client:
        job = await client.enqueue(t.add, 1, 2)
        ctx = await client.enqueue(t.ctx, "tag")  # the job context is no argument of the caller's
        assert job.state is ctx.state is JobState.SUBMITTED


async def test_with_the_setting_off_a_mistyped_call_goes_through(
    settings: EngineSettings,
) -> None:
    assert settings.check_argument_types is False  # the default
    async with Client(settings) as client:
        job = await client.enqueue(t.add, 1, "2")
        assert (await client.jobs.get(job.id)).args == [1, "2"]
    with SyncClient(settings) as sync:
        assert sync.enqueue(t.add, 1, "2").state is JobState.SUBMITTED


def test_the_message_names_the_argument_the_type_and_the_value() -> None:
    with pytest.raises(ArgumentTypeError, match=r"argument 'tags'\[1\]: .*expected list\[str\]"):
        check_arguments(typed, [1, ["a", 2]], {})
    with pytest.raises(ArgumentTypeError, match=r"argument 'more': .*expected float, given str"):
        check_arguments(typed, [1, [], 1.5, "x"], {})
    with pytest.raises(ArgumentTypeError, match=r"argument 'extra': .*expected bool, given int 1"):
        check_arguments(typed, [1, []], {"flag": 1})
    with pytest.raises(ArgumentTypeError, match=r"argument 'note': .*expected str \| None"):
        check_arguments(typed, [1, []], {"note": 5})
    with pytest.raises(
        ArgumentTypeError,
        match=r"'size': Input should match one of the types \(expected int \| str, given float",
    ):
        check_arguments(typed, [1, []], {"size": 1.5})
    with pytest.raises(ArgumentTypeError, match="argument 'tag'"):  # after the job context
        check_arguments(t.ctx, [5], {})
    check_arguments(typed, [1, ["a"], 2, 2.5], {"note": None, "flag": True})  # strict, as JSON
    check_arguments(typed, [1], {})  # does not bind: the signature check's to name
    check_arguments(task_ref("typed"), ["x"], {})  # no function here: nothing to check


def test_a_job_is_checked_against_the_task_that_made_it_or_its_name() -> None:
    made = t.add.call(1, "2")
    with pytest.raises(ArgumentTypeError):
        check_job_arguments(made)
    by_name = task_ref("add").call(1, "2")
    check_job_arguments(by_name)  # nothing to check it against
    with pytest.raises(ArgumentTypeError):
        check_job_arguments(by_name, {"add": t.add})


def test_the_schema_of_a_tasks_arguments() -> None:
    schema = argument_schema(typed)
    assert schema["required"] == ["n", "tags"]
    assert schema["properties"]["tags"] == {"items": {"type": "string"}, "type": "array"}
    assert argument_schema(task_ref("typed")) == {"type": "object"}


def test_the_command_line_turns_it_on() -> None:
    assert parse_overrides(["check_argument_types=yes"]) == {"check_argument_types": True}
    assert parse_overrides(["check_argument_types=False"]) == {"check_argument_types": False}
    with pytest.raises(SystemExit, match="not a valid bool"):
        parse_overrides(["check_argument_types=maybe"])
