"""A worker whose lease was taken writes nothing: every script that writes for a running attempt
refuses the old attempt's token, and the job stays as its new owner has it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources

from engine import Client
from engine.errors import Code
from engine.seam.rows import BeginJob, CompleteJob, RenewJob

from . import tasks as t
from .test_scripts import claim_one

# Scripts that name a token without writing for one attempt, and why.
NOT_AN_ATTEMPT_WRITE = {
    "claim-12.lua": "issues the tokens",
    "disown-4.lua": "a worker starting again hands back the jobs of every token it holds",
    "resubmit-11.lua": "clears the token of a finished job it runs again",
}


async def test_every_attempt_write_refuses_a_token_whose_lease_was_taken(client: Client) -> None:
    k = client.keys("default")
    job = await client.enqueue(t.add, 1, 1)
    old = await claim_one(client, "w1")
    # w1's lease is taken: its job goes back (as a late lease's does) and w2 claims it.
    released = await client.scripts.release(
        k, events_maxlen=1000, worker_id="w1", job_id=job.id, token=old.token, reason="late"
    )
    assert released == Code.OK
    new = await claim_one(client, "w2")
    assert (new.id, new.token != old.token) == (job.id, True)
    await client.scripts.checkpoint(k, job_id=job.id, token=new.token, state=b'{"row":3}')
    before = await client.redis.hgetall(k.job(job.id))
    started = await client.redis.zscore(k.started, job.id)

    stale = old.token
    said = {"events_maxlen": 1000, "worker_id": "w1", "job_id": job.id, "token": stale}
    writes: dict[str, Callable[[], Awaitable[int | list[int]]]] = {
        "begin-2.lua": lambda: client.scripts.begin(
            k, lease_ms=30_000, jobs=[BeginJob(job.id, stale, False)]
        ),
        "heartbeat-1.lua": lambda: client.scripts.heartbeat(
            k, jobs=[RenewJob(job.id, stale, 90_000, True)]
        ),
        "progress-1.lua": lambda: client.scripts.progress(k, percent=50, message="half", **said),
        "log-1.lua": lambda: client.scripts.log(
            k, message="late", max_lines=100, max_bytes=10_000, **said
        ),
        "checkpoint-1.lua": lambda: client.scripts.checkpoint(
            k, job_id=job.id, token=stale, state=b'{"row":0}'
        ),
        "complete-11.lua": lambda: client.scripts.complete(
            k,
            events_maxlen=1000,
            worker_id="w1",
            jobs=[CompleteJob(job.id, stale, b"2", 60_000)],
        ),
        "retry-11.lua": lambda: client.scripts.retry(
            k, delay_ms=0, error_json=b'{"type":"X"}', short_error="X", ttl_ms=60_000, **said
        ),
        "fail-11.lua": lambda: client.scripts.fail(
            k,
            state="failed",
            error_json=b'{"type":"X"}',
            short_error="X",
            ttl_ms=60_000,
            **said,
        ),
        "stall-11.lua": lambda: client.scripts.stall(
            k, error_json=b'{"type":"X"}', short_reason="X", ttl_ms=60_000, **said
        ),
        "release-4.lua": lambda: client.scripts.release(k, reason="late", **said),
    }
    for name, write in writes.items():
        answer = await write()
        code = answer[0] if isinstance(answer, list) else answer
        assert code == Code.LEASE_LOST, (name, answer)
    # Nothing the stale worker sent changed the job, its lease or its place.
    assert await client.redis.hgetall(k.job(job.id)) == before
    assert await client.redis.zscore(k.started, job.id) == started
    # Every script that names a token is in the table, or says why it is not an attempt's write.
    naming = {
        entry.name
        for entry in (resources.files("engine") / "lua").iterdir()
        if entry.name.endswith(".lua") and "token" in entry.read_text(encoding="utf-8")
    }
    assert naming == set(writes) | set(NOT_AN_ATTEMPT_WRITE), naming ^ (
        set(writes) | set(NOT_AN_ATTEMPT_WRITE)
    )
