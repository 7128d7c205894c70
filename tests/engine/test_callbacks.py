"""Callbacks: on_success and on_failure jobs, and children that run on a parent's failure or end,
through a real worker on a real Redis."""

from __future__ import annotations

from typing import Any

import pytest

from engine import Client, ConfigError, EngineSettings, JobContext, JobState, task
from engine.errors import InvalidArguments

from .helpers import drain


class Flaky(Exception):
    """A failure the tasks below retry."""


@task(name="cb.note", takes_context=True)
async def note(ctx: JobContext, parent_id: str, tag: str = "") -> dict[str, Any]:
    """Return what a callback sees of its parents."""
    return {
        "tag": tag,
        "parent_id": parent_id,
        "parents": ctx.parents,
        "results": await ctx.parent_results(),
        "errors": await ctx.parent_errors(),
    }


@task(name="cb.double", max_retries=0)
async def double(n: int) -> int:
    return n * 2


@task(name="cb.broken", max_retries=0)
async def broken(reason: str) -> None:
    raise ValueError(reason)


@task(
    name="cb.once_flaky",
    takes_context=True,
    max_retries=2,
    backoff=None,
    expected_exceptions=(Flaky,),
)
async def once_flaky(ctx: JobContext) -> int:
    if ctx.attempt == 1:
        raise Flaky("first attempt fails")
    return ctx.attempt


@task(name="cb.always_flaky", max_retries=1, backoff=None, expected_exceptions=(Flaky,))
async def always_flaky() -> None:
    raise Flaky("every attempt fails")


@task(name="cb.with_defaults", on_success=(note, {"tag": "task ok"}), on_failure="cb.note")
async def with_defaults(fail: bool) -> str:
    if fail:
        raise ValueError("asked to fail")
    return "fine"


@task(name="cb.plain")
async def plain() -> None:
    return None


ALL = [note, double, broken, once_flaky, always_flaky, with_defaults]


async def _state(client: Client, job_id: str) -> JobState:
    return (await client.jobs.get(job_id)).state


async def test_a_success_callback_runs_after_success_and_reads_the_result(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(double.using(on_success=(note, {"tag": "done"})), 21)
    (callback,) = job.callbacks
    assert callback.state is JobState.BLOCKED
    await drain(settings, ALL)
    ran = await client.jobs.get(callback.id)
    assert ran.state is JobState.COMPLETED
    assert ran.result == {
        "tag": "done",
        "parent_id": job.id,
        "parents": [job.id],
        "results": {job.id: 42},
        "errors": {job.id: None},
    }


async def test_a_success_callback_is_cancelled_when_its_job_fails(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(broken.using(on_success=note), "no luck")
    await drain(settings, ALL)
    assert await _state(client, job.id) is JobState.FAILED
    ended = await client.jobs.get(job.callbacks[0].id)
    assert ended.state is JobState.CANCELLED
    assert ended.errors[-1]["message"] == f"parent {job.id} ended failed"


async def test_a_failure_callback_runs_after_the_final_failure_with_the_error(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(always_flaky.using(on_failure=note))
    await drain(settings, ALL)
    assert (await client.jobs.get(job.id)).attempt == 2
    ran = await client.jobs.get(job.callbacks[0].id)
    assert ran.state is JobState.COMPLETED
    assert ran.attempt == 1  # once, after the last attempt, not after the retried one
    error = ran.result["errors"][job.id]
    assert (error["type"], error["message"], error["attempt"]) == (
        "Flaky",
        "retries exhausted (1): every attempt fails",
        2,
    )
    assert ran.result["results"] == {job.id: None}


async def test_a_failure_callback_is_cancelled_when_its_job_completes_after_a_retry(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(once_flaky.using(on_failure=note))
    await drain(settings, ALL)
    assert await _state(client, job.id) is JobState.COMPLETED
    ended = await client.jobs.get(job.callbacks[0].id)
    assert ended.state is JobState.CANCELLED
    assert ended.errors[-1]["type"] == "ParentDidNotFail"
    assert ended.errors[-1]["message"] == (
        f"parent {job.id} completed: failure callback not needed"
    )


async def test_a_failure_callback_is_cancelled_when_its_job_is_cancelled(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(double.using(on_failure=note, delay_s=60), 1)
    await client.jobs.cancel([job.id])
    ended = await client.jobs.get(job.callbacks[0].id)
    assert ended.state is JobState.CANCELLED
    assert ended.errors[-1]["message"] == (
        f"parent {job.id} ended cancelled: failure callback not needed"
    )


@pytest.mark.parametrize("fail", [False, True])
async def test_an_end_child_runs_whatever_its_parent_ends_in(
    client: Client, settings: EngineSettings, fail: bool
) -> None:
    parent = broken.call("down") if fail else double.call(5)
    child = note.using(depends_on=[parent], runs_on="end").call(parent_id=parent.id)
    await client.enqueue_flow([parent, child])
    await drain(settings, ALL)
    ran = await client.jobs.get(child.id)
    assert ran.state is JobState.COMPLETED
    if fail:
        assert ran.result["results"] == {parent.id: None}
        assert ran.result["errors"][parent.id]["message"] == "down"
    else:
        assert ran.result["results"] == {parent.id: 10}
        assert ran.result["errors"] == {parent.id: None}


async def test_task_callbacks_apply_to_every_call_unless_the_call_overrides_them(
    client: Client, settings: EngineSettings
) -> None:
    ok = await client.enqueue(with_defaults, False)
    failed = await client.enqueue(with_defaults, True)
    replaced = await client.enqueue(with_defaults.using(on_success=(note, {"tag": "mine"})), False)
    bare = await client.enqueue(with_defaults.using(on_success=None, on_failure=None), False)
    assert [len(j.callbacks) for j in (ok, failed, replaced, bare)] == [2, 2, 2, 0]
    await drain(settings, ALL)
    ok_success, ok_failure = [await client.jobs.get(c.id) for c in ok.callbacks]
    assert ok_success.state is JobState.COMPLETED and ok_success.result["tag"] == "task ok"
    assert ok_failure.state is JobState.CANCELLED
    failed_success, failed_failure = [await client.jobs.get(c.id) for c in failed.callbacks]
    assert failed_success.state is JobState.CANCELLED
    assert failed_failure.state is JobState.COMPLETED
    assert failed_failure.result["errors"][failed.id]["message"] == "asked to fail"
    mine = await client.jobs.get(replaced.callbacks[0].id)
    assert mine.result["tag"] == "mine"


async def test_callbacks_are_written_in_the_same_step_as_their_job(
    client: Client, settings: EngineSettings
) -> None:
    job = double.using(on_success=note, on_failure=note).call(1)
    (done,) = await client.enqueue_many([job])
    assert done is job
    states = [await _state(client, c.id) for c in job.callbacks]
    assert states == [JobState.BLOCKED, JobState.BLOCKED]
    callbacks = [await client.jobs.get(c.id) for c in job.callbacks]
    assert [c.runs_on for c in callbacks] == [None, "failure"]
    assert all(c.parents == [job.id] and c.kwargs == {"parent_id": job.id} for c in callbacks)
    assert all(c.flow_id is None for c in callbacks)  # a lone job is no flow


async def test_a_task_without_callbacks_writes_no_runs_on_field(client: Client) -> None:
    job = await client.enqueue(plain)
    fields = await client.redis.hgetall(client.keys("default").job(job.id))
    assert job.callbacks == []
    assert not {b"runs_on", b"rn"} & set(fields)


async def test_bad_callbacks_are_refused_before_anything_is_written(client: Client) -> None:
    with pytest.raises(ConfigError, match="on_failure takes a task"):
        double.using(on_failure=42)
    with pytest.raises(ConfigError, match="parent_id is given by the engine"):
        double.using(on_success=(note, {"parent_id": "x"}))
    with pytest.raises(ConfigError, match="runs_on must be"):
        note.using(runs_on="sometimes")
    with pytest.raises(InvalidArguments, match="parent_id"):
        double.using(on_success=double).call(1)  # a callback takes parent_id
    assert await client.redis.dbsize() == 0


async def test_a_resubmitted_failure_callback_of_a_completed_parent_is_cancelled_again(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(double.using(on_failure=note), 2)
    await drain(settings, ALL)
    callback = job.callbacks[0]
    assert await _state(client, callback.id) is JobState.CANCELLED
    assert await client.jobs.resubmit("default", [callback.id]) == 1
    assert await _state(client, callback.id) is JobState.CANCELLED


async def test_a_failure_child_of_an_ended_parent_is_settled_at_submit(
    client: Client, settings: EngineSettings
) -> None:
    failed = await client.enqueue(broken, "early")
    completed = await client.enqueue(double, 1)
    await drain(settings, ALL)
    late = note.using(depends_on=[failed.id], runs_on="failure")
    ready = await client.enqueue(late, parent_id=failed.id)
    assert ready.state is JobState.SUBMITTED
    unneeded = note.using(depends_on=[completed.id], runs_on="failure")
    skipped = await client.enqueue(unneeded, parent_id=completed.id)
    assert skipped.state is JobState.CANCELLED
    await drain(settings, ALL)
    assert await _state(client, ready.id) is JobState.COMPLETED
