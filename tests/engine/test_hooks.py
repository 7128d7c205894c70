"""Hooks around each job: before it runs, after it ends, on retry, on dead letter; never fatal."""

from __future__ import annotations

from engine import Client, EngineSettings, HookEvent, Worker

from . import tasks as t


async def test_hooks_see_every_job_and_a_raising_hook_changes_nothing(
    settings: EngineSettings, client: Client
) -> None:
    seen: list[tuple[str, str, str | None]] = []

    def record(event: HookEvent) -> None:
        seen.append((event.kind, event.job.task, event.outcome))

    async def record_async(event: HookEvent) -> None:
        if event.kind == "retry":
            assert event.delay_s is not None and event.error is not None
            seen.append(("async-retry", event.job.task, event.outcome))

    def broken(event: HookEvent) -> None:
        raise RuntimeError("a bug in a hook")

    ok = await client.enqueue(t.add, 1, 2)
    dead = await client.enqueue(t.boom)
    again = await client.enqueue(t.retry_twice)
    worker = Worker(
        settings, [t.add, t.boom, t.retry_twice], burst=True, hooks=[broken, record, record_async]
    )
    await worker.run()

    assert (await client.jobs.get(ok.id)).state == "completed"
    assert (await client.jobs.get(dead.id)).state == "failed"
    assert (await client.jobs.get(again.id)).state == "completed"
    by_task = {
        name: [(kind, outcome) for kind, task, outcome in seen if task == name]
        for name in ("add", "boom", "retry_twice")
    }
    assert by_task["add"] == [("before_run", None), ("after_run", "completed")]
    # A retry and a dead letter come from the event stream (engine/periodic/transitions.py), read
    # beside the runs: in order for the job, in any order against its next run's hooks.
    assert by_task["boom"] == [
        ("before_run", None),
        ("after_run", "failed"),
        ("failed", "failed"),
        ("dead_letter", "failed"),
    ]
    runs = [e for e in by_task["retry_twice"] if e[0] in ("before_run", "after_run")]
    assert runs == [("before_run", None), ("after_run", "retry")] * 2 + [
        ("before_run", None),
        ("after_run", "completed"),
    ]
    retries = [e for e in by_task["retry_twice"] if e not in runs]
    assert retries == [("retry", "retry"), ("async-retry", "retry")] * 2
