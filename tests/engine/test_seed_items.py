"""Seed items of issue 37 through real workers: cleanup_on, repeat limits, skip events, timeouts."""

from __future__ import annotations

import pytest

from engine import Client, ConfigError, EngineSettings, JobState
from engine.task import TaskOptions

from . import tasks as t
from .helpers import drain


async def test_cleanup_on_keeps_each_final_state_its_own_time(
    client: Client, settings: EngineSettings
) -> None:
    """Failures kept a week outside the DLQ, completed jobs dropped at once (Jobbers)."""
    week_s = 7 * 86_400
    cleanup = {"failed": week_s, "completed": 0}
    done = await client.enqueue(t.add.using(cleanup_on=cleanup), 1, 2)
    failed = await client.enqueue(t.boom.using(cleanup_on=cleanup, max_retries=0))
    plain = await client.enqueue(t.add, 3, 4)
    await drain(settings, [t.add, t.boom])
    keys = client.keys("default")
    assert not await client.redis.exists(keys.job(done.id))  # dropped at once
    assert (await client.get(failed.id)).state is JobState.FAILED
    assert week_s * 1000 - 60_000 < await client.redis.pttl(keys.job(failed.id)) <= week_s * 1000
    assert [j.id for j in await client.dlq("default")] == []  # its retention, not the DLQ's
    assert 0 < await client.redis.pttl(keys.job(plain.id)) <= 86_400_000  # result_ttl_s as before


@pytest.mark.parametrize(
    "bad", [{"done": 5}, {"failed": -1}, {"failed": "7d"}, {"completed": True}, "failed"]
)
def test_cleanup_on_refuses_unknown_states_and_bad_values(bad: object) -> None:
    with pytest.raises(ConfigError, match="cleanup_on"):
        TaskOptions(cleanup_on=bad)  # type: ignore[arg-type]


def test_cleanup_on_takes_a_list_of_states_as_drop_at_once() -> None:
    assert TaskOptions(cleanup_on=["completed", "cancelled"]).cleanup_on == {
        "completed": 0,
        "cancelled": 0,
    }
