"""How a job ended, as a value: Ok(its result) or Err(how it ended otherwise), through a real
worker, on the async and the sync client; `unwrap()` raises what `jobs.result()` raises."""

from __future__ import annotations

import asyncio

import pytest

from engine import (
    Client,
    EngineSettings,
    Err,
    JobError,
    JobFailed,
    JobNotFound,
    JobTimeout,
    Ok,
    SyncClient,
    WrongState,
    outcome_of,
)

from . import tasks as t
from .helpers import drain


async def test_a_completed_job_is_ok_with_its_value(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(t.add, 2, 3)
    await drain(settings, [t.add])
    done = await client.jobs.outcome(job.id, timeout_s=5)
    assert done == Ok(5) and done.ok and done.error is None and done.unwrap() == 5
    assert await client.jobs.result(job.id, timeout_s=5) == 5


async def test_a_failed_job_is_err_with_its_errors_type_and_message(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(t.boom)
    await drain(settings, [t.boom])
    done = await client.jobs.outcome(job.id, timeout_s=5)
    assert isinstance(done, Err) and not done.ok and done.value is None
    assert done.error == JobError(
        job.id, "failed", "ValueError", "unexpected", exception="builtins.ValueError"
    )
    with pytest.raises(JobFailed) as unwrapped:
        done.unwrap()
    with pytest.raises(JobFailed) as raised:
        await client.jobs.result(job.id, timeout_s=5)
    assert unwrapped.value.error == raised.value.error == done.error
    assert str(raised.value) == f"job {job.id} failed: ValueError: unexpected"


async def test_an_err_the_task_returned_and_a_timeout_carry_their_codes(
    client: Client, settings: EngineSettings
) -> None:
    returned = await client.enqueue(t.explicit_err)
    slow = await client.enqueue(t.slow)  # times out twice: its one retry, then failed
    await drain(settings, [t.explicit_err, t.slow])
    err = await client.jobs.outcome(returned.id, timeout_s=5)
    assert isinstance(err, Err)
    assert (err.error.type, err.error.message, err.error.code) == (
        "TaskResult.err",
        "the input was bad",
        "bad_input",
    )
    timed_out = await client.jobs.outcome(slow.id, timeout_s=5)
    assert isinstance(timed_out, Err)
    assert (timed_out.error.state, timed_out.error.type, timed_out.error.code) == (
        "failed",
        "Timeout",
        "TIMEOUT",
    )
    assert "timed out after 0.1s" in timed_out.error.message


async def test_a_cancelled_job_is_err(client: Client) -> None:
    job = await client.enqueue(t.add.using(delay_s=60), 1, 1)
    await client.jobs.cancel([job.id])
    done = await client.jobs.outcome(job.id, timeout_s=5)
    assert done == Err(JobError(job.id, "cancelled", "Cancelled", "job ended cancelled"))
    with pytest.raises(JobFailed, match="cancelled"):
        done.unwrap()


async def test_a_wait_that_times_out_raises_rather_than_guess(client: Client) -> None:
    """A job still waiting has no outcome yet: the wait raises JobTimeout (a TimeoutError), as
    `jobs.wait` does, and the job may still complete later."""
    job = await client.enqueue(t.add.using(delay_s=60), 1, 1)
    with pytest.raises(JobTimeout, match="still scheduled"):
        await client.jobs.outcome(job.id, timeout_s=0.05)
    with pytest.raises(TimeoutError):
        await client.jobs.result(job.id, timeout_s=0.05)
    with pytest.raises(JobNotFound):
        await client.jobs.outcome("nobody", timeout_s=0.05)


async def test_the_sync_client_gives_the_same(client: Client, settings: EngineSettings) -> None:
    ok, failed = await client.enqueue(t.add, 2, 2), await client.enqueue(t.boom)
    waiting = await client.enqueue(t.add.using(delay_s=60), 1, 1)
    await client.jobs.cancel([waiting.id])
    await drain(settings, [t.add, t.boom])
    with SyncClient(settings) as sync:
        assert await asyncio.to_thread(sync.outcome, ok.id, 5) == Ok(4)
        assert await asyncio.to_thread(sync.result, ok.id, 5) == 4
        done = await asyncio.to_thread(sync.outcome, failed.id, 5)
        assert done == await client.jobs.outcome(failed.id, timeout_s=5)
        with pytest.raises(JobFailed, match="ValueError: unexpected"):
            await asyncio.to_thread(sync.result, failed.id, 5)
        assert (await asyncio.to_thread(sync.get, waiting.id)).state == "cancelled"
        later = await client.enqueue(t.add.using(delay_s=60), 1, 1)
        with pytest.raises(JobTimeout):
            await asyncio.to_thread(sync.outcome, later.id, 0.05)


def test_a_job_that_has_not_ended_has_no_outcome() -> None:
    with pytest.raises(WrongState, match="has not ended"):
        outcome_of("j1", "started", None, [])
    assert outcome_of("j1", "completed", [1], []) == Ok([1])
    # Only the newest error counts; a record that is not an object is skipped.
    older = {"type": "Flaky", "message": "try again"}
    assert outcome_of(
        "j1", "stalled", None, [older, {"type": "Stalled", "message": "lost"}, "x"]
    ) == Err(JobError("j1", "stalled", "Stalled", "lost"))
