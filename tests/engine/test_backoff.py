"""Every form of backoff a task may name: a strategy, a base, a list of delays, a callable of
the retry number or of nothing, and None (re-queue at once); through a real worker."""

from __future__ import annotations

import pytest

from engine import Client, ConfigError, EngineSettings, JobState, task
from engine.backoff import delay_s

from . import tasks as t
from .helpers import drain, sync_redis

ALL = [t.flaky]


def test_a_list_gives_each_retry_its_delay_and_the_last_repeats() -> None:
    assert [delay_s([60, 300, 900], n, None, 10_000) for n in (1, 2, 3, 4, 9)] == [
        60,
        300,
        900,
        900,
        900,
    ]
    assert delay_s([60, 300], 2, None, 100) == 100  # capped as every delay


def test_spread_is_the_exponential_delay_plus_or_minus_a_quarter() -> None:
    low = delay_s("exponential_spread", 3, 1.0, 1000, rng=lambda a, b: a)
    high = delay_s("exponential_spread", 3, 1.0, 1000, rng=lambda a, b: b)
    assert (low, high) == (6.0, 10.0)  # 8 s, 0.75 to 1.25 times


def test_a_callable_of_nothing_and_none() -> None:
    assert delay_s(lambda: 7, 3, None, 100) == 7
    assert delay_s(lambda n: n * 2, 3, None, 100) == 6
    assert delay_s(None, 3, 5.0, 100) is None


@pytest.mark.parametrize("bad", [[], [1, -1], ["a"], [float("nan")], lambda a, b: 1])
def test_bad_backoffs_are_refused(bad: object) -> None:
    with pytest.raises(ConfigError):
        task(name="x", backoff=bad)(lambda: None)  # type: ignore[arg-type]


def _moves(settings: EngineSettings, client: Client) -> list[tuple[str, str]]:
    with sync_redis(settings.redis_url, decode_responses=True) as r:
        return [(e["from"], e["to"]) for _, e in r.xrange(client.keys("default").events)]


async def test_a_callable_of_nothing_retries(client: Client, settings: EngineSettings) -> None:
    @task(
        name="no_arg_backoff",
        max_retries=2,
        expected_exceptions=(ValueError,),
        backoff=lambda: 0.05,
    )
    async def no_arg_backoff() -> None:
        raise ValueError("again")

    job = await client.enqueue(no_arg_backoff)
    await drain(settings, [no_arg_backoff])
    got = await client.jobs.get(job.id)
    assert got.state is JobState.FAILED and got.attempt == 3, got.errors
    assert "retries exhausted" in got.errors[-1]["message"]
    assert _moves(settings, client).count(("started", "scheduled")) == 2


async def test_none_requeues_at_once(client: Client, settings: EngineSettings) -> None:
    job = await client.enqueue(t.flaky.using(backoff=None, max_retries=2))
    await drain(settings, ALL)
    got = await client.jobs.get(job.id)
    assert got.state is JobState.FAILED and got.attempt == 3
    moves = _moves(settings, client)
    assert moves.count(("started", "submitted")) == 2 and ("started", "scheduled") not in moves


async def test_a_list_sets_each_retrys_wait(client: Client, settings: EngineSettings) -> None:
    # Waits far enough apart that a late promotion on a busy host cannot blur one into the next.
    job = await client.enqueue(t.flaky.using(backoff=[0.1, 1.0], max_retries=3))
    with sync_redis(settings.redis_url, decode_responses=True) as r:
        await drain(settings, ALL)
        events = r.xrange(client.keys("default").events)
    at: dict[tuple[str, str], int] = {}
    for _, e in events:
        at.setdefault((e["to"], e["attempt"]), int(e["at"]))
    for n, wait_ms in ((1, 100), (2, 1000), (3, 1000)):
        waited = at[("submitted", str(n))] - at[("scheduled", str(n))]
        assert wait_ms <= waited < wait_ms + 800, (n, waited)
    assert (await client.jobs.get(job.id)).attempt == 4
