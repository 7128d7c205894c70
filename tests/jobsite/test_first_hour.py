"""A Django team's first hour, as docs/install.md sets it up: an enqueue inside an atomic block
waits for the commit, a retry that can never happen is said, and the worker says what it does.
"""

from __future__ import annotations

import ast
import logging
import re
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
        for node in ast.parse(block).body:
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
