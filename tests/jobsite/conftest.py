"""Django-side fixtures: settings.JOBSITE pointed at the private redis-server."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis
from channels.layers import channel_layers
from django.contrib.auth.models import Group, Permission, User
from django.test import override_settings

from engine import EngineSettings, Worker
from engine.dev.devserver import RedisServer
from jobsite.jobs import conf
from jobsite.jobs.api.tokens import issue
from jobsite.jobs.history.mirror import Mirror
from jobsite.jobs.models import ApiToken
from jobsite.jobs.permissions import APP_LABEL, GROUPS, OPERATORS
from jobsite.jobs.tasks.djtasks import task_backends
from jobsite.jobs.tasks.registry import load_tasks
from jobsite.jobs.tasks.signals import WORKER_HOOKS

MODULES = ["demo.demo_tasks", "tests.jobsite.dj_tasks", "tests.engine.tasks"]


@pytest.fixture
def engine(redis_server: RedisServer) -> Iterator[EngineSettings]:
    """Point settings.JOBSITE at a flushed private Redis; return the EngineSettings."""
    with redis.Redis(port=redis_server.port) as r:
        r.flushall()
    values = {
        "REDIS_URL": redis_server.url,
        "PREFIX": "jobsite",
        "TASK_MODULES": MODULES,
        "QUEUES": ["default"],
        "SCHEDULER_INTERVAL_S": 0.05,
        "IDLE_WAIT_S": 0.2,
        "MIN_REPEAT_INTERVAL_S": 0.05,  # schedules of a fraction of a second, as the scheduler's
    }
    memory = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    with override_settings(JOBSITE=values, CHANNEL_LAYERS=memory):
        channel_layers.backends.clear()
        conf.engine_settings.cache_clear()
        task_backends["default"]._tasks = None
        yield conf.engine_settings()
    conf.engine_settings.cache_clear()
    channel_layers.backends.clear()


@pytest.fixture(autouse=True)
def jobsite_groups(request: pytest.FixtureRequest) -> None:
    """Make the groups of the data migration again: transactional tests flush them away."""
    if request.node.get_closest_marker("django_db") is None:
        return
    for name, codenames in GROUPS.items():
        group, made = Group.objects.get_or_create(name=name)
        if made:
            group.permissions.set(
                Permission.objects.filter(content_type__app_label=APP_LABEL, codename__in=codenames)
            )


def staff_user(name: str, group: str | None = None, **extra: object) -> User:
    """Create a staff user, in `group` (one of the groups the migration made) when given."""
    user = User.objects.create_user(name, password="x", is_staff=True, **extra)
    if group is not None:
        user.groups.add(Group.objects.get(name=group))
    return user


def make_token(user: User, **scope: object) -> str:
    """Create an API token of `user` (with `scope`: permissions, queues, expires_at)."""
    row = ApiToken(user=user, name=f"{user.username}-token", **scope)
    key = issue(row)
    row.save()
    return key


@pytest.fixture
def token() -> str:
    """Return the key of an API token of a staff user in the "Jobsite operators" group."""
    return make_token(staff_user("robot", OPERATORS))


async def run_worker(settings: EngineSettings) -> Worker:
    """Run a burst worker over every test task module."""
    worker = Worker(settings, load_tasks(MODULES), burst=True, hooks=WORKER_HOOKS)
    await worker.run()
    return worker


async def mirror_all(
    consumer: str = "mirror-test", queues: Sequence[str] = ("default",), **options: Any
) -> int:
    """Start a mirror of `queues` (Mirror's `options`), apply every event in the streams, close
    it; return events applied."""
    mirror = Mirror(list(queues), consumer=consumer, **options)
    try:
        await mirror.start()
        while await mirror.step(block_ms=50):
            pass
        return mirror.applied
    finally:
        await mirror.aclose()
