"""A job hash stores only what its key and the defaults do not already say.

Finished jobs make up most of Redis's memory (they stay there until their result_ttl ends).
Readers get the missing fields back from the key and from the defaults.
"""

from __future__ import annotations

from engine import Client, EngineSettings, JobState
from engine.fields import ATTRIBUTE

from . import tasks as t
from .helpers import STORED, drain

# Fields a finished job with default options must not store: the key's, the defaults', and
# those of a running job.
NOT_STORED = {"id", "queue", "version", "kwargs", "priority", "token", "begun", "isolated"}


async def _raw(client: Client, queue: str, job_id: str) -> dict[str, str]:
    """Return the stored fields of a job's hash, by attribute name (engine/fields.py)."""
    fields: dict[str, str] = await client.redis.hgetall(client.keys(queue).job(job_id))
    return {ATTRIBUTE[name]: value for name, value in fields.items()}


async def test_a_finished_job_stores_no_field_its_key_or_a_default_says(
    client: Client, settings: EngineSettings
) -> None:
    plain = await client.enqueue(t.tracked.using(queue="side"))  # returns None
    full = await client.enqueue(t.record.using(queue="side", priority=7), label="x")
    await drain(settings, [t.tracked, t.record], queues=["side"])
    stored = await _raw(client, "side", plain.id)
    assert stored["state"] == "completed"
    assert not NOT_STORED & set(stored), stored
    assert "result" not in stored  # a null result
    job = await client.jobs.get(plain.id)
    assert (job.id, job.queue, job.version, job.kwargs, job.priority) == (
        plain.id,
        "side",
        1,
        {},
        0,
    )
    assert job.state is JobState.COMPLETED and job.result is None and job.attempt == 1
    kept = await _raw(client, "side", full.id)
    assert (kept["priority"], kept["kwargs"], kept["result"]) == ("7", '{"label":"x"}', '"x"')
    assert (await client.jobs.get(full.id, queue="side")).queue == "side"


async def test_a_retried_job_loses_its_isolated_mark(
    client: Client, settings: EngineSettings
) -> None:
    """`isolated` lives only as long as the attempt that ran alone; release and retry drop it."""
    job = await client.enqueue(t.retry_twice)
    await client.redis.hset(
        client.keys("default").job(job.id), STORED.isolated, "1"
    )  # as begin does
    await drain(settings, [t.retry_twice])
    stored = await _raw(client, "default", job.id)
    assert stored["state"] == "completed" and stored["attempt"] == "3"
    assert "isolated" not in stored and "begun" not in stored
