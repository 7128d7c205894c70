"""JOBSITE["SCHEDULES"]: entries checked and built like the backends' jobs, synced by runworker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

from engine import ConfigError, EngineSettings, QueueKeys
from engine.job import by_attribute
from engine.producing.repeatable import template
from jobsite.jobs.tasks import schedules
from jobsite.jobs.tasks.backend import engine_ref
from tests.engine import tasks as t

from . import dj_tasks

ROOT = Path(__file__).resolve().parents[2]
SYNCED = re.compile(
    r"schedules synced (?:declared=\d+ )?created=(\d+) updated=(\d+) removed=(\d+) "
    r"kept_overrides=(\d+)"
)


@pytest.fixture
def declare(engine: EngineSettings) -> Iterator[Any]:
    """Return a function that sets JOBSITE["SCHEDULES"] (the engine fixture's JOBSITE)."""
    stack: list[Any] = []

    def set_schedules(entries: Any) -> None:
        overridden = override_settings(JOBSITE={**settings.JOBSITE, "SCHEDULES": entries})
        overridden.enable()
        stack.append(overridden)

    yield set_schedules
    for overridden in reversed(stack):
        overridden.disable()


def test_entries_make_the_jobs_the_backends_make(declare: Any) -> None:
    declare(
        [
            {"name": "often", "task": "add", "every_s": 60, "args": [1, 2]},
            {
                "name": "nightly-report",
                "task": "tests.jobsite.dj_tasks.add",
                "cron": "0 3 * * *",
                "tz": "Europe/Paris",
                "kwargs": {"a": 1, "b": 2},
                "queue": "default",
                "skip_if_running": True,
            },
        ]
    )
    often, nightly = schedules.declared()
    assert (often.name, often.every_s, often.queue) == ("often", 60, "default")
    assert often.origin == "settings" and not often.overridden
    assert often.job == template(t.add.call(1, 2), 1 << 20)
    assert (nightly.cron, nightly.tz) == ("0 3 * * *", "Europe/Paris")
    assert nightly.skip_if_running
    assert nightly.job == template(engine_ref(dj_tasks.add).call(a=1, b=2), 1 << 20)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x", "task": "nope", "every_s": 1}, "unknown task 'nope'"),
        ({"name": "x", "task": "add", "args": [1, 2]}, "exactly one of 'cron' and 'every_s'"),
        (
            {"name": "x", "task": "add", "args": [1, 2], "cron": "* * * * *", "every_s": 1},
            "exactly one of 'cron' and 'every_s'",
        ),
        ({"name": "x", "task": "add", "args": [1, 2], "cron": "61 * * * *"}, "invalid cron"),
        (
            {"name": "x", "task": "add", "args": [1, 2], "cron": "0 3 * * *", "tz": "Mars/Base"},
            "unknown time zone",
        ),
        ({"name": "no spaces", "task": "add", "args": [1, 2], "every_s": 1}, "names are"),
        ({"name": "x", "task": "add", "args": [datetime.now(UTC), 1], "every_s": 1}, "plain JSON"),
        ({"name": "x", "task": "add", "args": [float("nan"), 1], "every_s": 1}, "plain JSON"),
        ({"name": "x", "task": "add", "kwargs": {1: 2}, "every_s": 1}, "plain JSON"),
        ({"name": "x", "task": "add", "args": "1,2", "every_s": 1}, "args must be a list"),
        ({"name": "x", "task": "add", "args": [1], "every_s": 1}, "missing a required argument"),
        ({"name": "x", "task": "add", "args": [1, 2], "every_s": True}, "number of seconds"),
        ({"name": "x", "task": "add", "args": [1, 2], "every_s": -5}, "positive number"),
        (
            {"name": "x", "task": "add", "args": [1, 2], "every_s": 1, "skip_if_running": "yes"},
            "True or False",
        ),
        (
            {"name": "x", "task": "add", "args": [1, 2], "every_s": 1, "queue": "reports"},
            "not one of JOBSITE['QUEUES']",
        ),
        ({"name": "x", "task": "add", "every_s": 1, "priority": 5}, "unknown keys ['priority']"),
        ({"task": "add", "every_s": 1}, "'name' is required"),
        ("add every minute", "must be a dict"),
    ],
)
def test_each_mistake_is_named(declare: Any, entry: Any, message: str) -> None:
    declare([entry])
    [problem] = schedules.problems()
    assert problem.startswith("JOBSITE['SCHEDULES'][0]") and message in problem, problem
    with pytest.raises(ConfigError, match=re.escape(message)):
        schedules.declared()


def test_names_are_unique_and_the_setting_is_a_list(declare: Any) -> None:
    entry = {"name": "twice", "task": "add", "args": [1, 2], "every_s": 1}
    declare([entry, {**entry, "every_s": 2}])
    assert schedules.problems() == [
        "JOBSITE['SCHEDULES'][1] ('twice'): the name is used by an earlier entry"
    ]
    declare({"name": "twice"})
    assert schedules.problems() == [
        "JOBSITE['SCHEDULES'] must be a list of dicts, got {'name': 'twice'}"
    ]


def test_runworker_refuses_bad_schedules_before_it_starts(declare: Any) -> None:
    declare([{"name": "x", "task": "nope", "every_s": 1}])
    with pytest.raises(CommandError, match=r"JOBSITE\['SCHEDULES'\] is invalid: .*unknown task"):
        call_command("runworker", "--burst", "--only", "worker")


# runworker processes, as a deployment starts them.


def start_runworker(
    url: str, tmp_path: Path, log_name: str, entries: list[dict[str, Any]], *extra: str
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start `manage.py runworker --only worker` with these SCHEDULES; its output in a file."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.schedule_settings",
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "tests-only-" + "k" * 50),
        "REDIS_URL": url,
        "JOBSITE_TASK_MODULES": "tests.jobsite.dj_tasks,tests.engine.tasks",
        "JOBSITE_SCHEDULES": orjson.dumps(entries).decode(),
        "SQLITE_PATH": str(tmp_path / "db.sqlite3"),
    }
    log = tmp_path / f"{log_name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "runworker", "--only", "worker", *extra],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return proc, log


def synced(log: Path) -> list[tuple[int, ...]]:
    """Return the (created, updated, removed, kept_overrides) of each sync line in `log`."""
    return [tuple(int(n) for n in m.groups()) for m in SYNCED.finditer(log.read_text())]


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


KEYS = QueueKeys("jobsite", "default")


def test_three_runworkers_starting_at_once_declare_each_schedule_once(
    engine: EngineSettings, tmp_path: Path
) -> None:
    entries = [
        {
            "name": "nightly-report",
            "task": "tests.jobsite.dj_tasks.add",
            "cron": "0 3 * * *",
            "tz": "Europe/Paris",
            "args": [1, 2],
        },
        {"name": "hourly", "task": "add", "every_s": 3600, "args": [2, 3]},
    ]
    started = [
        start_runworker(engine.redis_url, tmp_path, f"w{i}", entries, "--burst") for i in range(3)
    ]
    try:
        for proc, log in started:
            assert proc.wait(timeout=90) == 0, log.read_text()
    finally:
        for proc, _ in started:
            stop(proc)
    lines = [synced(log) for _, log in started]
    assert all(len(found) == 1 for found in lines), lines
    assert sum(found[0][0] for found in lines) == 2  # each schedule created by one of them
    assert {found[0][1:] for found in lines} == {(0, 0, 0)}
    with redis.Redis.from_url(engine.redis_url, decode_responses=True) as r:
        assert set(r.hkeys(KEYS.repeats)) == {"nightly-report", "hourly"}
        assert r.smembers(KEYS.declared) == {"nightly-report", "hourly"}
        assert set(r.zrange(KEYS.repeat_due, 0, -1)) == {"nightly-report", "hourly"}

    # The entry gone from settings: the next runworker start removes its schedule.
    proc, log = start_runworker(engine.redis_url, tmp_path, "after", entries[1:], "--burst")
    try:
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        stop(proc)
    assert synced(log) == [(0, 0, 1, 0)]
    with redis.Redis.from_url(engine.redis_url, decode_responses=True) as r:
        assert r.hkeys(KEYS.repeats) == ["hourly"]
        assert r.smembers(KEYS.declared) == {"hourly"}
        assert r.zrange(KEYS.repeat_due, 0, -1) == ["hourly"]


@pytest.mark.any_database  # waits for the next minute; the database plays no part
def test_a_cron_schedule_fires_at_the_start_of_the_minute(
    engine: EngineSettings, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    entries = [
        {
            "name": "every-minute",
            "task": "tests.jobsite.dj_tasks.stamp",
            "cron": "* * * * *",
            "args": [str(ledger)],
        }
    ]
    proc, log = start_runworker(engine.redis_url, tmp_path, "cron", entries)
    try:
        deadline = time.monotonic() + 75
        while not ledger.exists() or not ledger.read_bytes().endswith(b"\n"):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        runs = [orjson.loads(line) for line in ledger.read_bytes().splitlines()]
        assert len(runs) == 1, runs
        job_id = runs[0]["id"]
        with redis.Redis.from_url(engine.redis_url, decode_responses=True) as r:
            while (fields := by_attribute(r.hgetall(KEYS.job(job_id)))).get("state") != "completed":
                assert time.monotonic() < deadline + 10, (fields, log.read_text())
                time.sleep(0.1)
    finally:
        stop(proc)
    assert synced(log) == [(1, 0, 0, 0)], log.read_text()
    name, _, due = job_id.partition("@")
    due_ms = int(due)
    assert name == "every-minute" and due_ms % 60_000 == 0  # a tick on the minute
    assert fields["repeat"] == "every-minute"
    submitted_ms = int(fields["submitted_at_ms"])  # Redis' own clock, set by submit-13.lua
    assert 0 <= submitted_ms - due_ms < 3_000, (submitted_ms, due_ms)  # second 0..2
    assert runs[0]["at_ms"] // 60_000 == due_ms // 60_000  # it ran in that same minute
