"""System checks catch a broken Jobsite configuration at `manage.py check`, before any job."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.test import override_settings

from engine.dev.devserver import free_port
from jobsite.jobs.checks import TAG

CHANNELS_REDIS = "channels_redis.core.RedisChannelLayer"


@pytest.fixture(autouse=True)
def private_redis(request: pytest.FixtureRequest) -> None:
    """Every check runs against the private redis-server (E008 pings it)."""
    request.getfixturevalue("engine")


def ids(**overrides: Any) -> list[str]:
    with override_settings(**overrides):
        return sorted(m.id for m in run_checks(tags=[TAG]) if m.id)


def engine(**values: Any) -> dict[str, Any]:
    return {**settings.JOBSITE, **values}


def layer(host: Any) -> dict[str, Any]:
    """Return CHANNEL_LAYERS of one channels_redis layer on `host`."""
    return {"default": {"BACKEND": CHANNELS_REDIS, "CONFIG": {"hosts": [host]}}}


def test_the_project_settings_pass() -> None:
    assert ids() == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"JOBSITE": None}, ["jobsite.E001"]),
        ({"JOBSITE": engine(BOGUS=1)}, ["jobsite.E002"]),
        ({"JOBSITE": engine(REDIS_URL="http://x")}, ["jobsite.E002"]),
        ({"JOBSITE": engine(TASK_MODULES=["no.such.module"])}, ["jobsite.E003"]),
        ({"JOBSITE": engine(QUEUES=["bad queue"])}, ["jobsite.E004"]),
        (
            {
                "JOBSITE": engine(
                    SCHEDULES=[
                        {"name": "x", "task": "nope", "every_s": 60},
                        {"name": "y", "task": "nope", "cron": "0 3 * * *", "every_s": 60},
                    ]
                )
            },
            ["jobsite.E005", "jobsite.E005"],
        ),
        # A task module that does not import is E003 only, not every schedule naming its tasks.
        (
            {
                "JOBSITE": engine(
                    TASK_MODULES=["no.such.module"],
                    SCHEDULES=[{"name": "x", "task": "no.such.module.f", "every_s": 60}],
                )
            },
            ["jobsite.E003"],
        ),
        (
            {
                "TASKS": {
                    "default": {
                        "BACKEND": "jobsite.jobs.tasks.backend.JobsiteBackend",
                        "QUEUES": ["default", "reports"],
                    }
                }
            },
            ["jobsite.W001"],
        ),
        (
            {"INSTALLED_APPS": [*settings.INSTALLED_APPS[:-2], "channels", "jobsite.jobs"]},
            ["jobsite.E006"],
        ),
        (
            {"INSTALLED_APPS": [a for a in settings.INSTALLED_APPS if a != "ninja"]},
            ["jobsite.W002"],
        ),
        ({"CHANNEL_LAYERS": {}}, ["jobsite.W005"]),
        # redis-py's reads give up after 5 s, as soon as channels_redis' 5 s BZPOPMIN
        ({"CHANNEL_LAYERS": layer("redis://127.0.0.1:6379/1")}, ["jobsite.W006"]),
        (
            {"CHANNEL_LAYERS": layer({"address": "redis://h/1", "socket_timeout": 3})},
            ["jobsite.W006"],
        ),
        ({"CHANNEL_LAYERS": layer("redis://h/1?socket_timeout=10")}, []),
        ({"CHANNEL_LAYERS": layer({"host": "h", "port": 6379, "socket_timeout": 10})}, []),
        ({"JOBSITE": engine(JOB_RETENTION_DAYS=-1)}, ["jobsite.E008"]),
        ({"JOBSITE": engine(JOB_RETENTION_DAYS_BY_STATE={"done": 5})}, ["jobsite.E008"]),
        ({"JOBSITE": engine(JOB_RETENTION_DAYS_BY_STATE={"failed": "a"})}, ["jobsite.E008"]),
        ({"JOBSITE": engine(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")}, ["jobsite.W003"]),
        ({"JOBSITE": engine(HEALTH={"BOGUS": 1})}, ["jobsite.E009"]),
        # Each value of its default's type, numbers not negative, per queue too.
        ({"JOBSITE": engine(HEALTH={"OLDEST_WAITING_S": "10m"})}, ["jobsite.E009"]),
        ({"JOBSITE": engine(HEALTH={"OLDEST_WAITING_S": -1})}, ["jobsite.E009"]),
        ({"JOBSITE": engine(HEALTH={"MAIL_ADMINS": "yes"})}, ["jobsite.E009"]),
        ({"JOBSITE": engine(HEALTH={"FAILURE_MIN_JOBS": 2.5})}, ["jobsite.E009"]),
        ({"JOBSITE": engine(HEALTH={"QUEUES": {"emails": {"OLDEST": 5}}})}, ["jobsite.E009"]),
        (
            {"JOBSITE": engine(HEALTH={"QUEUES": {"emails": {"DLQ_GROWTH": True}}})},
            ["jobsite.E009"],
        ),
        ({"JOBSITE": engine(HEALTH={"QUEUES": ["emails"]})}, ["jobsite.E009"]),
        ({"JOBSITE": engine(HEALTH={"OLDEST_WAITING_S": 60, "FAILURE_MIN_JOBS": 5})}, []),
        # A webhook needs a secret: the default, empty, would sign alerts with an empty key.
        ({"JOBSITE": engine(HEALTH={"WEBHOOK_URL": "https://hooks.example/x"})}, ["jobsite.E011"]),
        (
            {"JOBSITE": engine(HEALTH={"WEBHOOK_URL": "https://x.example", "WEBHOOK_SECRET": ""})},
            ["jobsite.E011"],
        ),
        (
            {"JOBSITE": engine(HEALTH={"WEBHOOK_URL": "file:///etc/x", "WEBHOOK_SECRET": "s"})},
            ["jobsite.E010"],
        ),
    ],
)
def test_each_mistake_is_named(overrides: dict[str, Any], expected: list[str]) -> None:
    assert ids(**overrides) == expected


def test_good_schedules_pass() -> None:
    schedule = {"name": "nightly", "task": "add", "args": [1, 2], "cron": "0 3 * * *"}
    jobsite = engine(TASK_MODULES=["tests.engine.tasks"], SCHEDULES=[schedule])
    assert ids(JOBSITE=jobsite) == []
    with override_settings(JOBSITE={**jobsite, "SCHEDULES": [{**schedule, "tz": "Mars/Base"}]}):
        [message] = [m for m in run_checks(tags=[TAG]) if m.id == "jobsite.E005"]
    assert "JOBSITE['SCHEDULES'][0] ('nightly'): unknown time zone" in message.msg


def test_a_webhook_with_a_secret_passes() -> None:
    health = {"WEBHOOK_URL": "https://hooks.example/x", "WEBHOOK_SECRET": "long-random"}
    assert ids(JOBSITE=engine(HEALTH=health)) == []
    assert ids(JOBSITE=engine(HEALTH={"MAIL_ADMINS": True})) == []  # no webhook, no secret
    with override_settings(JOBSITE=engine(HEALTH={"WEBHOOK_URL": "https://hooks.example/x"})):
        [message] = [m for m in run_checks(tags=[TAG]) if m.id == "jobsite.E011"]
    assert "WEBHOOK_SECRET is empty" in message.msg and "WEBHOOK_SECRET" in (message.hint or "")
