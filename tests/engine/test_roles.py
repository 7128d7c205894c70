"""Worker roles: a role names queues; a real worker started with `--role` follows a change of
them within seconds, without a restart. What ran is judged by the tasks' own ledger."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from engine import (
    Client,
    ConfigError,
    EngineSettings,
    Role,
    Worker,
    delete_role,
    get_role,
    list_roles,
    set_role,
)
from engine.keys import roles_key, roles_version_key

from . import chaos_tasks as ct
from .harness import WorkerProc, read_ledger
from .test_control import entry


async def stored(client: Client) -> tuple[Any, Any]:
    prefix = client.settings.prefix
    return await client.redis.hgetall(roles_key(prefix)), await client.redis.get(
        roles_version_key(prefix)
    )


async def test_set_get_list_delete(client: Client) -> None:
    prefix = client.settings.prefix
    assert await list_roles(client.redis, prefix) == []
    assert await get_role(client.redis, prefix, "etl") is None
    role = await set_role(client.redis, prefix, "etl", ["extract", "load"])
    assert role.queues == ("extract", "load") and role.changed_at_ms > 0
    await set_role(client.redis, prefix, "api", ["web"])
    assert [r.name for r in await list_roles(client.redis, prefix)] == ["api", "etl"]
    assert await get_role(client.redis, prefix, "etl") == role
    replaced = await set_role(client.redis, prefix, "etl", ["load"])
    assert (await get_role(client.redis, prefix, "etl")) == replaced
    assert replaced.to_dict()["queues"] == ["load"]
    assert await delete_role(client.redis, prefix, "etl") is True
    assert await delete_role(client.redis, prefix, "etl") is False
    assert [r.name for r in await list_roles(client.redis, prefix)] == ["api"]


@pytest.mark.parametrize(
    ("name", "queues"),
    [
        ("bad name", ["a"]),
        ("", ["a"]),
        ("x" * 101, ["a"]),
        ("ok", []),
        ("ok", "a,b"),
        ("ok", ["a", "a"]),
        ("ok", ["a b"]),
        ("ok", [1]),
        ("ok", [f"q{i}" for i in range(101)]),
    ],
)
async def test_bad_input_changes_nothing(client: Client, name: str, queues: Any) -> None:
    prefix = client.settings.prefix
    await set_role(client.redis, prefix, "keep", ["a"])
    before = await stored(client)
    with pytest.raises(ConfigError):
        await set_role(client.redis, prefix, name, queues)
    assert await stored(client) == before


async def test_bad_names_on_read_and_delete(client: Client) -> None:
    with pytest.raises(ConfigError):
        await get_role(client.redis, client.settings.prefix, "no/such")
    with pytest.raises(ConfigError):
        await delete_role(client.redis, client.settings.prefix, "")


async def test_unknown_role_at_start(settings: EngineSettings) -> None:
    with pytest.raises(ConfigError, match="queues or a role"):
        Worker(settings, [ct.work], queues=["a"], role="r")
    with pytest.raises(ConfigError, match="role names"):
        Worker(settings, [ct.work], role="no such")
    worker = Worker(settings, [ct.work], role="nobody")
    with pytest.raises(ConfigError, match="no role 'nobody'"):
        await worker.run()


def test_unknown_role_at_start_cli(settings: EngineSettings, ledger: Path) -> None:
    proc = WorkerProc(settings.redis_url, ledger, queues=None, extra=("--role", "ghost")).start()
    assert proc.wait(15) == 2
    assert "no role 'ghost'" in proc.output()
    both = WorkerProc(settings.redis_url, ledger, extra=("--role", "ghost")).start()
    assert both.wait(15) == 2
    assert "not both" in both.output()


def ended(ledger: Path) -> dict[str, float]:
    """Return job id -> when its run ended, from the ledger."""
    return {line["id"]: line["t"] for line in read_ledger(ledger) if line["kind"] == "end"}


def started(ledger: Path) -> dict[str, float]:
    return {line["id"]: line["t"] for line in read_ledger(ledger) if line["kind"] == "start"}


async def wait_ended(ledger: Path, ids: list[str], timeout_s: float) -> float:
    """Wait until the ledger shows every job of `ids` ended; return when (wall time)."""
    deadline = time.monotonic() + timeout_s
    while not set(ids) <= ended(ledger).keys():
        missing = set(ids) - ended(ledger).keys()
        assert time.monotonic() < deadline, f"not run: {sorted(missing)}"
        await asyncio.sleep(0.05)
    return time.time()


async def test_worker_follows_its_role_live(
    settings: EngineSettings, ledger: Path, procs: list[WorkerProc]
) -> None:
    prefix = settings.prefix
    async with Client(settings) as client:
        await set_role(client.redis, prefix, "etl", ["qa"])
        proc = WorkerProc(settings.redis_url, ledger, queues=None, extra=("--role", "etl"))
        procs.append(proc.start())
        info = await entry(client, proc.pid)
        assert (info["role"], info["queues"]) == ("etl", "qa")

        # It runs the role's queue; a long job of it is running when the role changes.
        await client.enqueue(ct.work.using(queue="qa", job_id="a-1"), 10)
        await wait_ended(ledger, ["a-1"], 10)
        await client.enqueue(ct.work.using(queue="qa", job_id="a-long"), 1500)
        deadline = time.monotonic() + 10
        while "a-long" not in started(ledger):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)

        # qa leaves the role, qb joins it: no restart.
        await set_role(client.redis, prefix, "etl", ["qb"])
        changed = time.time()
        await client.enqueue(ct.work.using(queue="qb", job_id="b-1"), 10)
        b_done = await wait_ended(ledger, ["b-1"], 10)
        assert b_done - changed < 5
        # The job it was running from qa ran to its end.
        await wait_ended(ledger, ["a-long"], 10)
        assert proc.alive()

        # Jobs of the queue it left wait: none starts while the role leaves qa out.
        info = await renewed_after(client, proc.pid, changed * 1000)
        assert (info["role"], info["queues"]) == ("etl", "qb")
        left = [f"a-after-{i}" for i in range(5)]
        for job_id in left:
            await client.enqueue(ct.work.using(queue="qa", job_id=job_id), 10)
        more_b = [f"b-more-{i}" for i in range(5)]
        for job_id in more_b:
            await client.enqueue(ct.work.using(queue="qb", job_id=job_id), 10)
        await wait_ended(ledger, more_b, 10)
        # Idle through two more upkeep rounds (several claim waits): still nothing from qa.
        await renewed_after(client, proc.pid, time.time() * 1000)
        assert not set(left) & started(ledger).keys()

        # qa back in the role: the waiting jobs run now, and only now.
        await set_role(client.redis, prefix, "etl", ["qb", "qa"])
        back = time.time()
        await wait_ended(ledger, left, 10)
        assert min(started(ledger)[j] for j in left) >= back

        # A deleted role: the worker keeps its last queues and says so once.
        await delete_role(client.redis, prefix, "etl")
        await until(lambda: "role deleted" in proc.output())
        await client.enqueue(ct.work.using(queue="qa", job_id="a-kept"), 10)
        await client.enqueue(ct.work.using(queue="qb", job_id="b-kept"), 10)
        await wait_ended(ledger, ["a-kept", "b-kept"], 10)
        await set_role(client.redis, prefix, "other", ["qz"])  # moves the counter again
        info = await renewed_after(client, proc.pid, time.time() * 1000)
        assert (info["role"], info["queues"]) == ("etl", "qb,qa")
    assert proc.output().count("role deleted") == 1


async def until(check: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def renewed_after(client: Client, pid: int, at_ms: float) -> dict[str, Any]:
    """Return the registry entry of worker `pid` once renewed twice after `at_ms` (its upkeep
    then read the roles after that time)."""
    seen: set[int] = set()
    deadline = time.monotonic() + 10
    while True:
        info = await entry(client, pid)
        if info["heartbeat_at_ms"] > at_ms:
            seen.add(info["heartbeat_at_ms"])
            if len(seen) >= 2:
                return info
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


def test_role_is_a_value(settings: EngineSettings) -> None:
    role = Role("r", ("a",), 5)
    assert Role.from_json("r", b'{"queues": ["a"], "changed_at_ms": 5}') == role


async def test_hooks_follow_the_role(settings: EngineSettings, client: Client) -> None:
    """A dead letter of a queue the role gained reaches the worker's hooks (from the stream)."""
    from engine import HookEvent

    from . import tasks as t

    seen: list[tuple[str, str]] = []

    def record(event: HookEvent) -> None:
        seen.append((event.kind, event.job.queue))

    await set_role(client.redis, settings.prefix, "r", ["qa"])
    worker = Worker(settings, [t.boom], role="r", hooks=[record])
    running = asyncio.create_task(worker.run())
    try:
        await until(lambda: worker.queues and worker.queues[0].queue == "qa")
        await set_role(client.redis, settings.prefix, "r", ["qb"])
        await until(lambda: [k.queue for k in worker.queues] == ["qb"])
        await client.enqueue(t.boom.using(queue="qb"))
        await until(lambda: ("dead_letter", "qb") in seen)
    finally:
        worker.stop()
        await running
    assert ("before_run", "qb") in seen


async def test_follower_reads_only_on_a_change_and_again_after_unread(client: Client) -> None:
    from engine.resources.roles import RoleFollower

    prefix = client.settings.prefix
    await set_role(client.redis, prefix, "r", ["a"])
    follower = RoleFollower(prefix, "r")
    assert await follower.load(client.redis) == ["a"]
    assert await follower.changed(client.redis) is None
    await set_role(client.redis, prefix, "other", ["x"])  # the counter moves, r does not
    assert await follower.changed(client.redis) is None
    await set_role(client.redis, prefix, "r", ["b", "a"])
    assert await follower.changed(client.redis) == ["b", "a"]
    assert await follower.changed(client.redis) is None
    follower.unread()  # the swap failed: the next poll hands the queues over again
    assert await follower.changed(client.redis) == ["b", "a"]
