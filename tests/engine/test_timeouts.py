"""A timeout is an error with the code TIMEOUT: retry_on and no_retry_on decide its retry, as
they do for a RetryableError's code; through a real worker."""

from __future__ import annotations

import asyncio

from engine import Client, EngineSettings, JobState, RetryableError, task

from .helpers import drain


@task(name="sleepy_default", timeout_s=0.05, max_retries=1, retry_delay_s=0.01)
async def sleepy_default() -> None:
    await asyncio.sleep(1)


@task(name="sleepy_no_retry", timeout_s=0.05, max_retries=1, no_retry_on={"TIMEOUT"})
async def sleepy_no_retry() -> None:
    await asyncio.sleep(1)


@task(name="sleepy_other_codes", timeout_s=0.05, max_retries=1, retry_on={"rate_limited"})
async def sleepy_other_codes() -> None:
    await asyncio.sleep(1)


@task(
    name="sleepy_retry_on", timeout_s=0.05, max_retries=1, retry_on={"TIMEOUT"}, retry_delay_s=0.01
)
async def sleepy_retry_on() -> None:
    await asyncio.sleep(1)


@task(name="refused_code", max_retries=3, no_retry_on={"bad_request"})
async def refused_code(code: str) -> None:
    raise RetryableError(code)


ALL = [sleepy_default, sleepy_no_retry, sleepy_other_codes, sleepy_retry_on, refused_code]


async def test_timeouts_follow_retry_on_and_no_retry_on(
    client: Client, settings: EngineSettings
) -> None:
    jobs = {t.name: await client.enqueue(t) for t in ALL[:4]}
    await drain(settings, ALL)
    attempts = {}
    for name, job in jobs.items():
        got = await client.jobs.get(job.id)
        assert got.state is JobState.FAILED and got.errors[0]["code"] == "TIMEOUT", got.errors
        attempts[name] = got.attempt
    assert attempts == {
        "sleepy_default": 2,  # no rule: a timeout retries, as before
        "sleepy_no_retry": 1,
        "sleepy_other_codes": 1,  # retry_on names other codes only
        "sleepy_retry_on": 2,
    }


async def test_no_retry_on_refuses_its_codes_only(client: Client, settings: EngineSettings) -> None:
    refused = await client.enqueue(refused_code, "bad_request")
    retried = await client.enqueue(refused_code.using(retry_delay_s=0.01), "flaky")
    await drain(settings, ALL)
    assert (await client.jobs.get(refused.id)).attempt == 1
    assert (await client.jobs.get(retried.id)).attempt == 4
