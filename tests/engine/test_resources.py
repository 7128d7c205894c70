"""The client's resources, and the old Client methods that forward to them for one release."""

from __future__ import annotations

import inspect

import pytest

from engine import Client
from engine.client import _MOVED

from . import tasks as t


async def test_every_moved_method_names_a_method_of_its_resource(client: Client) -> None:
    for old, (resource, method) in _MOVED.items():
        target = getattr(getattr(client, resource), method)
        assert inspect.iscoroutinefunction(target), (old, resource, method)


async def test_an_old_method_answers_as_its_resource_does_with_a_warning(client: Client) -> None:
    job = await client.enqueue(t.add, 1, 2)
    with pytest.warns(DeprecationWarning, match=r"Client.get is client.jobs.get now"):
        old = await client.get(job.id)
    assert old == await client.jobs.get(job.id)
    with pytest.warns(DeprecationWarning, match=r"client.queues\(\) is client.queues.names\(\)"):
        assert await client.queues() == await client.queues.names() == ["default"]
    with pytest.warns(DeprecationWarning, match=r"client.workers\(\) is client.workers.list\(\)"):
        assert await client.workers() == []
    with pytest.warns(DeprecationWarning, match=r"Client.dlq is client.dead_letters.list now"):
        assert await client.dlq("default") == []
    with pytest.raises(AttributeError, match="no_such_method"):
        client.no_such_method  # noqa: B018 (the attribute access is the test)
