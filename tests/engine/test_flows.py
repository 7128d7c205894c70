"""Flows: depends_on, blocked jobs, parent results and the parent-failure policies."""

from __future__ import annotations

import pytest

from engine import Client, ConfigError, DuplicateJob, EngineSettings, JobState
from engine.errors import UnknownParent

from . import tasks as t
from .helpers import dbsize, drain


async def test_a_diamond_flow_runs_in_order_and_children_see_parent_results(
    client: Client, settings: EngineSettings
) -> None:
    t.ORDER.clear()
    a = t.step.call("a")
    b = t.step.using(depends_on=[a]).call("b")
    c = t.step.using(depends_on=[a]).call("c")
    d = t.step.using(depends_on=[b, c]).call("d")
    await client.enqueue_flow([d, c, b, a])  # any order: the client puts parents first
    assert [j.state for j in (a, b, c, d)] == [JobState.SUBMITTED] + [JobState.BLOCKED] * 3
    assert (await client.queues.counts("default"))["blocked"] == 3
    await drain(settings, [t.step], concurrency=4)
    assert t.ORDER[0] == "a" and sorted(t.ORDER[1:3]) == ["b", "c"] and t.ORDER[3] == "d"
    done = await client.jobs.get(d.id)
    assert done.state is JobState.COMPLETED
    assert done.result == {"label": "d", "saw": ["b", "c"]}
    assert (await client.jobs.get(b.id)).result == {"label": "b", "saw": ["a"]}
    assert (await client.queues.counts("default"))["blocked"] == 0


async def test_a_child_of_a_completed_parent_is_ready_at_once(
    client: Client, settings: EngineSettings
) -> None:
    parent = await client.enqueue(t.step, "p")
    await drain(settings, [t.step])
    child = await client.enqueue(t.step.using(depends_on=[parent.id]), "c")
    assert child.state is JobState.SUBMITTED


@pytest.mark.parametrize(
    ("policy", "child_state"),
    [("fail", JobState.FAILED), ("cancel", JobState.CANCELLED)],
)
async def test_a_failed_parent_ends_its_children_by_their_policy(
    client: Client, settings: EngineSettings, policy: str, child_state: JobState
) -> None:
    parent = t.fails_first_time.call(f"parent-{policy}")
    child = t.step.using(depends_on=[parent], on_parent_failure=policy).call("child")
    grandchild = t.step.using(depends_on=[child], on_parent_failure="fail").call("grandchild")
    await client.enqueue_flow([parent, child, grandchild])
    await drain(settings, [t.fails_first_time, t.step])
    ended = await client.jobs.get(child.id)
    assert ended.state is child_state
    assert ended.errors[-1]["type"] == "ParentFailed"
    assert ended.errors[-1]["message"] == f"parent {parent.id} ended failed"
    last = await client.jobs.get(grandchild.id)  # the policy cascades down the graph
    assert last.state is JobState.FAILED
    assert last.errors[-1]["message"] == f"parent {child.id} ended {child_state}"
    assert (await client.queues.counts("default"))["blocked"] == 0


async def test_wait_keeps_children_blocked_until_a_resubmitted_parent_completes(
    client: Client, settings: EngineSettings
) -> None:
    parent = t.fails_first_time.call("parent-wait")
    child = t.step.using(depends_on=[parent]).call("child")  # on_parent_failure="wait"
    await client.enqueue_flow([parent, child])
    await drain(settings, [t.fails_first_time, t.step])
    assert (await client.jobs.get(parent.id)).state is JobState.FAILED
    assert (await client.jobs.get(child.id)).state is JobState.BLOCKED  # inspectable, not lost
    assert await client.jobs.resubmit("default", [parent.id]) == 1
    await drain(settings, [t.fails_first_time, t.step])
    assert (await client.jobs.get(child.id)).state is JobState.COMPLETED


async def test_a_child_of_an_already_failed_parent_gets_its_policy_at_submit(
    client: Client, settings: EngineSettings
) -> None:
    parent = await client.enqueue(t.fails_first_time, "already-failed")
    await drain(settings, [t.fails_first_time])
    child = await client.enqueue(
        t.step.using(depends_on=[parent], on_parent_failure="cancel"), "late"
    )
    assert child.state is JobState.CANCELLED


async def test_a_blocked_job_can_be_cancelled(client: Client, settings: EngineSettings) -> None:
    parent = t.step.call("p")
    child = t.step.using(depends_on=[parent]).call("c")
    await client.enqueue_flow([parent, child])
    assert await client.jobs.cancel([child.id]) == {child.id: "cancelled"}
    await drain(settings, [t.step])
    assert (await client.jobs.get(child.id)).state is JobState.CANCELLED


async def test_bad_flows_are_refused_and_write_nothing(
    client: Client, settings: EngineSettings
) -> None:
    existing = await client.enqueue(t.step, "existing")
    before = dbsize(settings)
    x = t.step.using(job_id="x", depends_on=["y"]).call("x")
    y = t.step.using(job_id="y", depends_on=["x"]).call("y")
    with pytest.raises(ConfigError, match="cycle"):
        await client.enqueue_flow([x, y])
    with pytest.raises(ConfigError, match="itself"):
        await client.enqueue(t.step.using(job_id="me", depends_on=["me"]), "me")
    with pytest.raises(UnknownParent, match="'nope'"):
        await client.enqueue_flow([t.step.call("ok"), t.step.using(depends_on=["nope"]).call("c")])
    with pytest.raises(DuplicateJob):
        await client.enqueue_flow(
            [t.step.call("new"), t.step.using(job_id=existing.id).call("again")]
        )
    other = t.step.using(queue="other").call("o")
    with pytest.raises(ConfigError, match="one queue"):
        await client.enqueue_flow([other, t.step.using(depends_on=[other]).call("c")])
    with pytest.raises(ConfigError, match="on_parent_failure"):
        t.step.using(on_parent_failure="retry")
    assert dbsize(settings) == before


async def test_a_deduplicated_parent_makes_the_child_wait_for_the_holder(
    client: Client, settings: EngineSettings
) -> None:
    once = t.step.using(deduplication={"id": "fetch"})
    holder = await client.enqueue(once, "holder")
    parent = once.call("parent")
    child = t.step.using(depends_on=[parent]).call("child")
    await client.enqueue_flow([parent, child])
    assert parent.id == holder.id and child.state is JobState.BLOCKED
    await drain(settings, [t.step])
    done = await client.jobs.get(child.id)
    assert done.state is JobState.COMPLETED and done.parents == [holder.id]
    assert done.result == {"label": "child", "saw": ["holder"]}


async def test_a_resubmitted_child_waits_for_its_parents_again(
    client: Client, settings: EngineSettings
) -> None:
    parent = t.fails_first_time.call("parent-resubmit")
    child = t.step.using(depends_on=[parent], on_parent_failure="fail").call("child")
    await client.enqueue_flow([parent, child])
    await drain(settings, [t.fails_first_time, t.step])
    assert (await client.jobs.get(child.id)).state is JobState.FAILED
    assert await client.jobs.resubmit("default", [child.id]) == 1  # its parent is still failed
    again = await client.jobs.get(child.id)
    assert again.state is JobState.FAILED and again.errors[-1]["type"] == "ParentFailed"
    assert await client.jobs.resubmit("default", [parent.id]) == 1
    assert await client.jobs.resubmit("default", [child.id]) == 1
    assert (await client.jobs.get(child.id)).state is JobState.BLOCKED  # waits for the rerun
    await drain(settings, [t.fails_first_time, t.step])
    assert (await client.jobs.get(child.id)).state is JobState.COMPLETED


async def test_a_resubmitted_cancelled_parent_keeps_its_children(
    client: Client, settings: EngineSettings
) -> None:
    parent = t.step.using(delay_s=60).call("p")
    child = t.step.using(depends_on=[parent]).call("c")
    await client.enqueue_flow([parent, child])
    await client.jobs.cancel([parent.id])
    children = client.keys("default").children(parent.id)
    assert await client.redis.pttl(children) > 0  # expires with the cancelled parent
    assert await client.jobs.resubmit("default", [parent.id]) == 1
    assert await client.redis.pttl(children) == -1
    await drain(settings, [t.step])
    assert (await client.jobs.get(child.id)).state is JobState.COMPLETED


async def test_a_repeatable_cannot_depend_on_jobs(client: Client) -> None:
    with pytest.raises(ConfigError, match="cannot depend"):
        await client.repeats.add("r", t.step.using(depends_on=["x"]).call("r"), every_s=1)


async def test_a_flow_shares_one_flow_id_and_a_lone_job_has_none(client: Client) -> None:
    a = t.step.call("a")
    b = t.step.using(depends_on=[a]).call("b")
    await client.enqueue_flow([a, b])
    ids = {(await client.jobs.get(j.id)).flow_id for j in (a, b)}
    assert len(ids) == 1 and None not in ids
    alone = await client.enqueue(t.step, "alone")
    assert (await client.jobs.get(alone.id)).flow_id is None


async def test_a_queue_rate_limit_can_be_read_back(client: Client) -> None:
    assert await client.queues.rate_limit_ms("default") is None
    await client.queues.set_rate_limit("default", "4/s")
    assert await client.queues.rate_limit_ms("default") == 250.0
    await client.queues.set_rate_limit("default", None)
    assert await client.queues.rate_limit_ms("default") is None
