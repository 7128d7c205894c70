"""The worker's lifecycle: its transitions, the waits its collaborators share, the words it shows,
and a worker that crashes while quiet (its claim loop waited on quiet for ever before)."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass

import pytest

from engine import Client, EngineSettings, LoopCrashed, Worker
from engine.worker.lifecycle import ALLOWED, Lifecycle, State

from . import tasks as t


@dataclass
class Shown:
    state: str = ""


def test_every_state_has_its_moves_and_crashed_is_the_end() -> None:
    assert set(ALLOWED) == set(State)
    assert all(
        State.CRASHED in moves for state, moves in ALLOWED.items() if state is not State.CRASHED
    )
    assert ALLOWED[State.CRASHED] == frozenset()
    life = Lifecycle("w")
    life.stop()
    with pytest.raises(RuntimeError, match="no transition from stopping to claiming"):
        life._move(State.CLAIMING)


def test_quiet_resume_stop_force_and_the_words_shown(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="engine.worker")
    life, shown, stops = Lifecycle("w1"), Shown(), []
    life.show_in(shown)
    life.on_stop(lambda: stops.append(life.state))
    assert shown.state == "claiming"
    life.quiet(by="control")
    assert (life.state, shown.state) == (State.QUIET, "quiet")
    life.quiet(by="control")  # read again with the next renewal: nothing more
    life.resume(by="control")
    assert (life.state, shown.state) == (State.CLAIMING, "claiming")
    life.quiet(by="control")
    life.stop()
    # A quiet worker that stops shows it (a resume no longer reaches a stopping worker).
    assert (life.state, shown.state) == (State.STOPPING, "stopping")
    assert life.stopping.is_set() and not life.forced.is_set() and stops == [State.STOPPING]
    life.resume(by="control")
    life.quiet(by="control")
    assert life.state is State.STOPPING  # the way out is one way
    life.stop()
    assert life.state is State.FORCED and life.forced.is_set()
    life.stop()
    assert life.state is State.FORCED and stops == [State.STOPPING]
    lines = [r.getMessage() for r in caplog.records]
    assert "worker quiet id=w1 claims=off by=control" in lines
    assert "worker resumed id=w1 claims=on by=control" in lines
    assert "worker forced id=w1 was=stopping by=second_stop" in lines


def test_retire_shows_retiring_and_happens_once() -> None:
    life, shown = Lifecycle("w"), Shown()
    life.show_in(shown)
    life.retire("reason=max_jobs jobs=3 max_jobs=3")
    life.retire("reason=max_rss")
    assert life.retired == "reason=max_jobs jobs=3 max_jobs=3"
    assert (life.state, shown.state) == (State.STOPPING, "retiring")
    stopped = Lifecycle("w")
    stopped.stop()
    stopped.retire("reason=max_age")
    assert stopped.retired is None


def test_a_crash_keeps_the_first_exception_and_forces(caplog: pytest.LogCaptureFixture) -> None:
    life, stops = Lifecycle("w2"), []
    life.on_stop(lambda: stops.append(1))
    first, second = RuntimeError("first"), RuntimeError("second")
    life.crash(first, "loop crashed loop=upkeep")
    life.crash(second, "loop crashed loop=cleaner")
    assert life.crashed is first and life.state is State.CRASHED
    assert life.stopping.is_set() and life.forced.is_set() and stops == [1]
    assert life.shown == "stopping"
    line = next(r.getMessage() for r in caplog.records if "loop=upkeep" in r.getMessage())
    assert line == "loop crashed loop=upkeep worker=w2 was=claiming state=crashed"


def test_the_end_of_a_run_fences_nothing() -> None:
    life, stops = Lifecycle("w"), []
    life.on_stop(lambda: stops.append(1))
    life.end()
    assert life.state is State.STOPPING and life.stopping.is_set() and stops == []


async def test_the_waits_end_at_a_stop() -> None:
    life = Lifecycle("w")
    life.quiet(by="test")
    room = asyncio.Event()
    waits = [
        asyncio.create_task(life.wait_claiming()),
        asyncio.create_task(life.wait_unless_stopped(room)),
    ]
    await asyncio.sleep(0.01)
    assert not any(w.done() for w in waits)
    life.stop()
    await asyncio.wait_for(asyncio.gather(*waits), 1)
    await asyncio.wait_for(life.wait_unless_stopped(asyncio.Event()), 1)  # stopped: at once


async def test_crashes_of_steps_and_threads_go_through_it() -> None:
    life = Lifecycle("w")
    life.bind()

    async def bug() -> None:
        raise ValueError("step")

    step = asyncio.create_task(bug())
    step.add_done_callback(life.crash_on_bug)
    await asyncio.gather(step, return_exceptions=True)
    await asyncio.sleep(0)
    assert isinstance(life.crashed, ValueError) and life.state is State.CRASHED

    other = Lifecycle("w")
    other.bind()
    thread = threading.Thread(target=other.crash_from_thread, args=(KeyError("thread"),))
    thread.start()
    thread.join()
    for _ in range(10):
        await asyncio.sleep(0.01)
    assert isinstance(other.crashed, KeyError) and other.state is State.CRASHED


async def test_a_quiet_worker_that_crashes_ends(settings: EngineSettings, client: Client) -> None:
    worker = Worker(settings, [t.add], concurrency=2)
    running = asyncio.create_task(worker.run())
    await asyncio.sleep(0.3)
    await client.workers.control("quiet", worker=worker.id)
    for _ in range(100):
        if worker.life.state is State.QUIET:
            break
        await asyncio.sleep(0.05)
    assert worker.liveness.status.state == "quiet"
    await asyncio.sleep(0.5)  # its claim loop waits for claims to resume
    worker.life.crash(RuntimeError("bug"), "loop crashed loop=test")
    with pytest.raises(LoopCrashed):
        await asyncio.wait_for(running, 10)
    assert worker.crashed is not None and worker.liveness.status.state == "stopping"
