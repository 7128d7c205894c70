"""A stopped worker exits within its bound whatever Redis does (engine/worker/exitbound.py).

The worker's own part: outcomes a dead Redis cannot take are given `shutdown_exit_s`, then left
to the leases in one logged line (before, the exit waited for them with no deadline, and a
second signal did not end the wait). The process's part: ExitGuard ends a process that a thread
holds past the bound (a first signal's, later while a `continue` job runs, a second signal's).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from engine import Client, EngineSettings, Worker
from engine.dev.devserver import RedisServer
from engine.worker.exitbound import EXIT_SLACK_S, FORCED_EXIT_S

from . import tasks as t

pytestmark = pytest.mark.chaos

GRACE_S = 0.5
JOBS = 5
# What a loaded test machine adds to a measured exit.
LOAD_S = 1.0


async def _busy_worker_on_a_dead_redis(
    exit_s: float,
) -> tuple[RedisServer, Worker, asyncio.Task[None]]:
    """Return a worker running JOBS jobs whose Redis was just SIGKILLed (its server stopped)."""
    server = RedisServer().start()
    settings = EngineSettings.from_url(
        server.url, idle_wait_s=0.2, shutdown_grace_s=GRACE_S, shutdown_exit_s=exit_s
    )
    async with Client(settings) as client:
        await client.enqueue_many([t.waits.call(0.3) for _ in range(JOBS)])
    worker = Worker(settings, [t.waits], concurrency=JOBS)
    running = asyncio.create_task(worker.run())
    deadline = time.monotonic() + 10
    while len(worker.book.active) < JOBS:
        assert time.monotonic() < deadline and not running.done()
        await asyncio.sleep(0.01)
    server.stop(signal.SIGKILL)
    return server, worker, running


async def test_outcomes_a_dead_redis_cannot_take_are_left_after_the_exit_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="engine")
    exit_s = 1.0
    server, worker, running = await _busy_worker_on_a_dead_redis(exit_s)
    try:
        began = time.monotonic()
        worker.stop()
        await asyncio.wait_for(running, GRACE_S + exit_s + EXIT_SLACK_S + LOAD_S)
        took = time.monotonic() - began
    finally:
        server.cleanup()
    print(f"\nexit with a dead Redis: {took:.2f} s (grace {GRACE_S:g} + exit {exit_s:g})")
    assert took <= GRACE_S + exit_s + EXIT_SLACK_S
    [line] = [r.getMessage() for r in caplog.records if "worker exit abandoned" in r.getMessage()]
    assert f"outcomes_unwritten={JOBS}" in line and "recovery=cleaner_via_leases" in line


async def test_a_second_stop_cuts_the_exit_budget() -> None:
    exit_s = 60.0  # a first stop alone would wait this long for the outcomes
    server, worker, running = await _busy_worker_on_a_dead_redis(exit_s)
    try:
        worker.stop()
        await asyncio.sleep(0.2)
        second = time.monotonic()
        worker.stop()
        await asyncio.wait_for(running, GRACE_S + FORCED_EXIT_S + EXIT_SLACK_S + LOAD_S)
        took = time.monotonic() - second
    finally:
        server.cleanup()
    print(f"\nexit after a second stop, Redis dead: {took:.2f} s")
    assert took <= FORCED_EXIT_S + EXIT_SLACK_S


# A process whose exit a non-daemon thread holds (60 s), with a guard armed as a stop arms it.
GUARDED = """
import logging, signal, threading, time
from engine import ExitGuard
logging.basicConfig(level=logging.INFO)
began = time.monotonic()
guard = ExitGuard(0.5, busy=lambda: time.monotonic() < began + {busy_s})
guard.stop_signal(signal.SIGTERM, 0.2)
if {second}:
    guard.stop_signal(signal.SIGTERM, 0.2)
threading.Thread(target=time.sleep, args=(60,), name="stuck").start()
"""


@pytest.mark.parametrize(
    ("busy_s", "second", "bound_s"),
    [
        (0.0, False, 0.2 + 0.5 + EXIT_SLACK_S),  # grace + exit + slack
        (1.5, False, 1.5 + 0.5 + EXIT_SLACK_S),  # a continue job ran 1.5 s: exit + slack after
        (30.0, True, FORCED_EXIT_S + EXIT_SLACK_S),  # a second signal: whatever runs
    ],
)
def test_the_guard_ends_a_process_a_thread_holds(
    busy_s: float, second: bool, bound_s: float
) -> None:
    code = textwrap.dedent(GUARDED.format(busy_s=busy_s, second=second))
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=bound_s + 20
    )
    took = time.monotonic() - began
    print(f"\nguard: busy_s={busy_s} second={second} took_s={took:.2f} bound_s={bound_s:g}")
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "exit forced" in done.stderr and "threads_alive=stuck" in done.stderr, done.stderr
    assert bound_s - 0.1 <= took <= bound_s + LOAD_S
