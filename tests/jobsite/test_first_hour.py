"""A Django team's first hour, as docs/install.md sets it up: an enqueue inside an atomic block
waits for the commit, a retry that can never happen is said, and the worker says what it does.
"""

from __future__ import annotations

import ast
import logging
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.db import transaction
from django.test import override_settings

from engine import EngineSettings
from jobsite.jobs.models import OutboxEntry
from tests.jobsite import dj_tasks

pytestmark = pytest.mark.django_db(transaction=True)
DOCS = Path(__file__).resolve().parents[2] / "docs"


def documented(name: str) -> Any:
    """Return the value install.md's settings block gives `name` (read, never run)."""
    text = (DOCS / "install.md").read_text()
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        try:
            body = ast.parse(textwrap.dedent(block)).body
        except SyntaxError:  # a fragment, not settings
            continue
        for node in body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
                return ast.literal_eval(node.value)
    raise AssertionError(f"install.md sets no {name}")


def in_redis(settings: EngineSettings, job_id: str) -> bool:
    with redis.Redis.from_url(settings.redis_url) as r:
        return bool(r.exists(f"{settings.prefix}:{{default}}:job:{job_id}"))


def test_the_documented_backend_waits_for_the_commit(engine: EngineSettings) -> None:
    backends = documented("TASKS")
    backends["default"]["QUEUES"] = []  # install.md names its own queues; these are the tests'
    with override_settings(TASKS=backends):
        with transaction.atomic():
            order = User.objects.create_user("order-1")
            result = dj_tasks.add.enqueue(order.pk, 1)
            # A worker polling Redis now finds nothing: the row it would read is not committed.
            assert not in_redis(engine, result.id)
        assert in_redis(engine, result.id)
        with pytest.raises(RuntimeError), transaction.atomic():
            User.objects.create_user("order-2")
            dropped = dj_tasks.add.enqueue(2, 2)
            raise RuntimeError("payment refused: the order rolls back")
        assert not in_redis(engine, dropped.id)
        assert not OutboxEntry.objects.filter(job_id=dropped.id).exists()


def test_an_enqueue_before_the_commit_is_warned_once_per_task(
    engine: EngineSettings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "jobsite.tasks")
    with transaction.atomic():
        dj_tasks.add.enqueue(1, 1)
        dj_tasks.add.enqueue(2, 2)
        dj_tasks.explode.enqueue()
    dj_tasks.add.enqueue(3, 3)  # outside a transaction: nothing to say
    lines = [r.getMessage() for r in caplog.records if r.name == "jobsite.tasks"]
    assert len(lines) == 2, lines
    assert "task=tests.jobsite.dj_tasks.add" in lines[0] and "TRANSACTIONAL_OUTBOX" in lines[0]
    assert "task=tests.jobsite.dj_tasks.explode" in lines[1]


def test_a_max_retries_that_can_never_be_used_is_a_check_warning(engine: EngineSettings) -> None:
    from django.conf import settings

    from jobsite.jobs.checks import check_retries

    values = {**settings.JOBSITE, "TASK_MODULES": ["tests.jobsite.retry_tasks"]}
    with override_settings(JOBSITE=values):
        found = check_retries()
    assert [m.id for m in found] == ["jobsite.W004"]  # fetch lists its exception; poll raises Retry
    assert "'first_hour.charge' sets max_retries=4" in found[0].msg
    assert "expected_exceptions" in (found[0].hint or "")


def test_a_failure_says_why_it_was_not_retried(engine: EngineSettings) -> None:
    from asgiref.sync import async_to_sync

    from engine import Worker
    from jobsite.jobs import services
    from jobsite.jobs.permissions import OPERATORS
    from jobsite.jobs.tasks.registry import load_tasks
    from tests.jobsite import retry_tasks

    from .conftest import make_token, mirror_all, staff_user
    from .test_job_identity import api

    charged = services.enqueue(retry_tasks.charge, 7)
    fetched = services.enqueue(retry_tasks.fetch.using(max_retries=1, retry_delay_s=0), "x")

    async def drain() -> None:
        await Worker(engine, load_tasks(["tests.jobsite.retry_tasks"]), burst=True).run()

    async_to_sync(drain)()
    async_to_sync(drain)()  # the retry of fetch
    async_to_sync(mirror_all)()
    key = make_token(staff_user("op", OPERATORS))
    job = api("get", f"/jobs/{charged.id}", key).json()
    assert job["state"] == "failed" and len(job["errors"]) == 1
    assert job["errors"][0]["not_retried"].startswith("ValueError is not in expected_exceptions")
    again = api("get", f"/jobs/{fetched.id}", key).json()
    assert again["errors"][-1]["not_retried"] == "retries exhausted (max_retries=1)"
    groups = api("get", "/dead-letters", key).json()
    said = {g["sample"]["not_retried"] for g in groups if g["sample"]}
    assert any(s.startswith("ValueError is not in expected_exceptions") for s in said), groups


def test_runworker_says_what_it_does(engine: EngineSettings, tmp_path: Path) -> None:
    """In a project without LOGGING: a banner on stdout, then the schedule sync's lines."""
    import os
    import subprocess

    from .test_schedules import start_runworker

    entry = {
        "name": "nightly",
        "task": "add",
        "args": [1, 2],
        "cron": "0 3 * * *",
    }
    os.environ["JOBSITE_PLAIN_LOGGING"] = "1"
    try:
        proc, log = start_runworker(
            engine.redis_url, tmp_path, "plain", [entry], "--burst", "-v", "1"
        )
    finally:
        del os.environ["JOBSITE_PLAIN_LOGGING"]
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "Jobsite runworker: pid" in text
    assert f"redis        {engine.redacted_url}" in text
    from django.db import connection

    assert f"database     {connection.vendor} " in text  # sqlite, or postgresql on that pass
    assert re.search(r"tasks        \d+: add, ", text), text
    assert "loops        worker (with scheduler and cleaner)" in text
    assert "schedules synced declared=1 created=1" in text
    assert "schedule declared queue=default name=nightly cron='0 3 * * *'" in text


def test_a_staff_user_without_a_group_is_told_how_to_get_in(engine: EngineSettings) -> None:
    from django.test import Client as WebClient

    from .conftest import staff_user

    web = WebClient()
    web.force_login(staff_user("new-hire"))
    for page in ("/dashboard/", "/dashboard/schedules/"):
        answer = web.get(page)
        text = answer.content.decode()
        assert answer.status_code == 403
        assert "Jobsite viewers" in text and "Jobsite operators" in text, text
        assert "jobsite.view_jobrecord" in text and 'href="/admin/"' in text
