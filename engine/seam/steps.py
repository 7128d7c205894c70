"""Steps apart from their I/O, and their drivers on an asyncio and on a synchronous client.

A generator of steps (an enqueue's, engine/producing/enqueueing.py; a read's, reads.py) yields
what to send to Redis (a pipeline of commands, one command, one script call or the question of
the hash format), or a pause between polls, and is sent each reply, or thrown each failure; a
driver sends each step and hands back its reply.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from ..keys import QueueKeys
from ..transport.acks import ReplicaAcks
from ..transport.held import HeldConnections
from .hashformat import discover
from .luasrc import ScriptSet, run_sync


@dataclass(frozen=True, slots=True)
class Pipe:
    """Commands sent in one pipeline (no transaction): (method name, args, options) each."""

    commands: list[tuple[str, tuple[Any, ...], dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Call:
    """One command, by client method name."""

    method: str
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Eval:
    """One call of transition script `verb` with a queue's keys."""

    verb: str
    keys: QueueKeys
    argv: list[Any]


@dataclass(frozen=True, slots=True)
class Format:
    """Ask for the hash format of the Redis (engine/seam/hashformat.py): the driver answers
    from its scripts, which ask Redis once."""


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait this long before the next step (a poll's interval): no Redis, no reply."""

    seconds: float


Step = Pipe | Call | Eval | Format | Pause
Steps = Generator[Step, Any, Any]


async def run_async(step: Step, redis: Redis, scripts: ScriptSet) -> Any:
    """Send one step on an asyncio client; return its reply."""
    if isinstance(step, Eval):
        return await scripts[step.verb](step.keys, step.argv)
    if isinstance(step, Format):
        return scripts.known or await scripts.hash_format()
    if isinstance(step, Pause):
        await asyncio.sleep(step.seconds)
        return None
    if isinstance(step, Call):
        return await getattr(redis, step.method)(*step.args)
    if not step.commands:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for method, args, options in step.commands:
            getattr(pipe, method)(*args, **options)
        return await pipe.execute()


async def drive_async(steps: Steps, redis: Redis, scripts: ScriptSet) -> Any:
    """Run `steps` on an asyncio client; return what they return."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value
        finally:
            error = None
        try:
            reply = await run_async(step, redis, scripts)
        except BaseException as exc:  # given to the steps: they may clean up, then re-raise
            reply, error = None, exc


def run_steps(steps: Generator[Any, Any, Any], run: Any) -> Any:
    """Run `steps` (an enqueue's, or any generator of commands), each by the synchronous
    `run(step)`; return what they return."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value
        finally:
            error = None
        try:
            reply = run(step)
        except BaseException as exc:  # given to the steps: they may clean up, then re-raise
            reply, error = None, exc


def hash_format_sync(redis: Any, prefix: str) -> int:
    """Return the hash format of the Redis at `prefix` (hashformat.discover) on a synchronous
    client."""

    def command(sent: tuple[str, tuple[Any, ...], dict[str, Any]]) -> Any:
        method, args, options = sent
        return getattr(redis, method)(*args, **options)

    fmt: int = run_steps(discover(prefix), command)
    return fmt


def run_step_sync(
    step: Step, redis: Any, held: HeldConnections | None, fmt: int, acks: ReplicaAcks | None
) -> Any:
    """Send one step on a synchronous client, its script calls on `held` connections when
    given, for hash format `fmt`, waiting for `acks`; return its reply."""
    if isinstance(step, Format):
        return fmt
    if isinstance(step, Pause):
        time.sleep(step.seconds)
        return None
    if isinstance(step, Eval):
        return run_sync(held or redis, step.verb, step.keys, step.argv, fmt, acks)
    if isinstance(step, Call):
        return getattr(redis, step.method)(*step.args)
    if not step.commands:
        return []
    with redis.pipeline(transaction=False) as pipe:
        for method, args, options in step.commands:
            getattr(pipe, method)(*args, **options)
        return pipe.execute()
