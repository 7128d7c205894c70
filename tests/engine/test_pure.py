"""Pure tests: backoff formulas, the job model, settings, task options, windows (no Redis)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

from engine import (
    TERMINAL_STATES,
    ConfigError,
    EngineSettings,
    InvalidArguments,
    Job,
    JobState,
    check_job_id,
    redact_url,
    task,
)
from engine.backoff import delay_s


@pytest.mark.parametrize(
    ("backoff", "n", "expected"),
    [
        ("constant", 3, 2.0),
        ("linear", 3, 6.0),
        ("exponential", 3, 16.0),
        (1.5, 2, 2.25),
        (lambda n: n * 10.0, 4, 40.0),
    ],
)
def test_backoff_formulas(backoff: object, n: int, expected: float) -> None:
    assert delay_s(backoff, n, 2.0, 3600) == pytest.approx(expected)  # type: ignore[arg-type]


def test_exponential_jitter_stays_in_window() -> None:
    values = [delay_s("exponential_jitter", 3, 1.0, 3600) for _ in range(500)]
    assert all(v is not None and 0 <= v <= 8.0 for v in values)
    assert max(v for v in values if v is not None) > 4.0  # spread, not a constant


def test_backoff_cap_and_immediate() -> None:
    assert delay_s("exponential", 20, 1.0, 300) == 300
    assert delay_s("exponential", 2, None, 300) is None  # no retry_delay: re-queue now


def test_terminal_states() -> None:
    assert len(JobState) == 12  # ten states, client-side unsubmitted, history-only lost
    assert {s.value for s in TERMINAL_STATES} == {
        "completed",
        "failed",
        "cancelled",
        "stalled",
        "dropped",
        "expired",
    }
    assert JobState.STALLED.is_terminal and not JobState.SCHEDULED.is_terminal


def test_hash_round_trip_keeps_unknown_keys() -> None:
    job = Job(id="j1", task="t", args=[1, "x"], kwargs={"k": [1]}, priority=5, sent_at_ms=10)
    fields = job.to_hash()
    fields["added_by_a_newer_version"] = "kept"
    back = Job.from_hash(fields)
    assert back.args == [1, "x"] and back.kwargs == {"k": [1]} and back.priority == 5
    assert back.extra == {"added_by_a_newer_version": "kept"}
    assert back.to_hash()["added_by_a_newer_version"] == "kept"


def test_dict_round_trip_keeps_unknown_keys() -> None:
    data = Job(id="j2", task="t", state=JobState.FAILED).to_dict()
    data.update(custom="yes", nested={"a": 1}, count=5, flags=[True, None])
    back = Job.from_dict(data)
    assert back.state is JobState.FAILED
    again = back.to_dict()
    assert (again["custom"], again["nested"], again["count"], again["flags"]) == (
        "yes",
        {"a": 1},
        5,
        [True, None],
    )
    # In the hash an unknown value is JSON text; read back, it stays that text.
    assert back.to_hash()["nested"] == '{"a":1}' and back.to_hash()["count"] == "5"


def test_dicts_in_the_other_common_spelling_are_read_with_their_key_names() -> None:
    job = Job.from_dict(
        {
            "id": "a1",
            "task_id": "etl.extract",
            "args": [1],
            "kwargs": {},
            "status": "delayed",
            "delay_until": 1_767_225_600.5,
            "created_at": 1_767_225_000,
            "depends_on": ["p1"],
            "last_error": "boom",
        }
    )
    assert (job.task, job.state, job.parents) == ("etl.extract", JobState.SCHEDULED, ["p1"])
    assert (job.run_at_ms, job.sent_at_ms) == (1_767_225_600_500, 1_767_225_000_000)
    assert job.extra == {"last_error": "boom"}
    assert Job.from_dict({"id": "a2", "task": "t", "status": "active"}).state is JobState.STARTED


def test_an_empty_state_reads_as_unsubmitted() -> None:
    assert Job.from_hash({"task": "t", "state": ""}, "j3").state is JobState.UNSUBMITTED
    assert Job.from_dict({"id": "j4", "task": "t", "state": ""}).state is JobState.UNSUBMITTED


# Every secret below is made of "s3c" and "r3t", which appear nowhere else.
REDACTED = [
    ("redis://user:s3cr3t@h:1/0", "redis://user:***@h:1/0"),
    ("rediss://:s3cr3t@h", "rediss://:***@h"),
    ("redis://h:1/0?password=s3cr3t", "redis://h:1/0?password=***"),
    ("redis://h/0?db=1&sentinel_password=s3cr3t&x=1", "redis://h/0?db=1&sentinel_password=***&x=1"),
    ("redis://h/0?Client_Secret=s3c&AUTH=r3t", "redis://h/0?Client_Secret=***&AUTH=***"),
    ("redis://h/0?access_token=s3cr3t&db=2", "redis://h/0?access_token=***&db=2"),
    ("redis://h/0?pass%77ord=s3cr3t", "redis://h/0?pass%77ord=***"),
    ("redis://u:s3c@h/0?password=r3t", "redis://u:***@h/0?password=***"),
    ("unix://:s3cr3t@/path/redis.sock?db=0", "unix://:***@/path/redis.sock?db=0"),
    ("unix://user:s3cr3t@/path/redis.sock", "unix://user:***@/path/redis.sock"),
    ("unix:///path/redis.sock?password=s3cr3t", "unix:///path/redis.sock?password=***"),
    ("redis+sentinel://:s3cr3t@h1:1,h2:2/mymaster", "redis+sentinel://:***@h1:1,h2:2/mymaster"),
    (
        "redis+sentinel://:s3c@h1:1,h2:2/m?sentinel_password=r3t",
        "redis+sentinel://:***@h1:1,h2:2/m?sentinel_password=***",
    ),
    ("redis+cluster://u:s3cr3t@h1:1,h2:2", "redis+cluster://u:***@h1:1,h2:2"),
    # Unencoded @ / ? # : & in a secret, an @ in a query value, garbage: hidden, never raised.
    ("redis://:s3c@/?#:r3t@h:1/0", "redis://:***@h:1/0"),
    ("redis://h/0?password=s3c@r3t", "redis://h/0?password=***"),
    ("redis://h/0?password=s3c&r3t&db=1", "redis://h/0?password=***&db=1"),
    ("redis://u:s3cr3t@[::1", "redis://u:***@[::1"),
    ("u:s3cr3t@host", "u:***@host"),
    ("redis://:s3c@h/0?client_name=a@b", "redis://:***@b"),
    ("not a url", "not a url"),
    ("", ""),
    ("redis://user@h:1/0?db=1", "redis://user@h:1/0?db=1"),
]


@pytest.mark.parametrize(("url", "shown"), REDACTED)
def test_redact_url_hides_every_secret(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3c" not in shown and "r3t" not in shown


@pytest.mark.parametrize(
    "url",
    [
        url
        for url, _ in REDACTED
        if url.split("://")[0] in ("redis", "rediss", "unix", "redis+sentinel") and "[" not in url
    ],
)
def test_settings_never_show_a_secret(url: str) -> None:
    s = EngineSettings.from_url(url)
    assert s.redacted_url == redact_url(url)
    assert "s3c" not in repr(s) and "r3t" not in repr(s)


def test_a_url_that_does_not_parse_is_refused_without_its_secret() -> None:
    with pytest.raises(ConfigError, match="does not parse") as info:
        EngineSettings.from_url("redis://u:s3cr3t@[::1")
    assert "s3cr3t" not in str(info.value) and "u:***@" in str(info.value)


def test_settings_validation_and_redaction() -> None:
    s = EngineSettings.from_url("redis://user:s3cret@localhost:6380/1")
    assert "s3cret" not in s.redacted_url and "s3cret" not in repr(s)
    assert s.redacted_url == "redis://user:***@localhost:6380/1"
    with pytest.raises(ConfigError):
        EngineSettings.from_url("http://localhost")
    with pytest.raises(ConfigError, match="unknown engine settings"):
        EngineSettings.from_mapping({"PREFIX": "x", "NOPE": 1})
    assert EngineSettings.from_mapping({"PREFIX": "x"}).prefix == "x"


def test_task_options_are_validated() -> None:
    with pytest.raises(ConfigError, match="priority"):
        task(lambda: None, priority=101)
    with pytest.raises(ConfigError, match="backoff"):
        task(lambda: None, backoff="sometimes")
    with pytest.raises(ConfigError, match="queue"):
        task(lambda: None, queue="bad:name")
    with pytest.raises(ConfigError, match="unknown task options"):
        task(lambda: None).using(colour="red")


def test_new_job_ids_are_uuid7_in_creation_order() -> None:
    made = []
    for _ in range(5):
        made.append(task(lambda: None).call().id)
        time.sleep(0.002)
    assert made == sorted(made) and len(set(made)) == 5
    parsed = uuid.UUID(made[0])
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert abs(int(made[0][:12], 16) - time.time() * 1000) < 60_000
    assert all(check_job_id(i) == i for i in made)


@pytest.mark.parametrize(
    "job_id",
    ["a", "x" * 128, "Order-42.v2:retry_1", "2026-01-01T00:00", "nightly@1767225600000", "a.."],
)
def test_job_id_rule_accepts(job_id: str) -> None:
    assert check_job_id(job_id) == job_id
    if "@" in job_id:  # a schedule tick's id: the engine makes it, no caller may choose it
        with pytest.raises(ConfigError, match="'@' is kept"):
            task(lambda: None).using(job_id=job_id)
    else:
        assert task(lambda: None).using(job_id=job_id).call().id == job_id


@pytest.mark.parametrize(
    "job_id",
    [
        "",
        "x" * 129,
        "a b",
        "../queues/default/pause?x=",
        "a/b",
        "ok\n",
        "é",
        "a{b}",
        7,
        ".",
        "..",
        ".hidden",
    ],
)
def test_job_id_rule_refuses(job_id: str) -> None:
    with pytest.raises(ConfigError, match="job ids are") as info:
        check_job_id(job_id)
    assert repr(job_id) in str(info.value)
    with pytest.raises(ConfigError, match="job ids are"):
        task(lambda: None).using(job_id=job_id)


def test_generated_job_ids_follow_the_rule() -> None:
    assert all(check_job_id(task(lambda: None).call().id) for _ in range(100))


def test_call_checks_the_signature() -> None:
    @task(name="two")
    def two(a: int, b: int) -> int:
        return a + b

    assert two.call(1, b=2).args == [1]
    with pytest.raises(InvalidArguments, match="two"):
        two.call(1, 2, 3)
    assert two(1, 2) == 3  # still callable in-process


def test_engine_imports_without_django() -> None:
    code = "import engine, sys; assert 'django' not in sys.modules, 'django imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_windows_keep_the_latest_oldest_first() -> None:
    from engine.worker.flusher import Windows

    windows = Windows(3)
    assert (list(windows), len(windows), max(windows, default=0.0)) == ([], 0, 0.0)
    windows.extend([1.0, 2.0])
    assert list(windows) == [1.0, 2.0]
    windows.extend(float(n) for n in range(3, 8))
    assert (list(windows), len(windows)) == ([5.0, 6.0, 7.0], 3)
