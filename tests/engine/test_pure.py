"""Pure tests: backoff formulas, the job model, settings and task options (no Redis)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine import (
    TERMINAL_STATES,
    ConfigError,
    EngineSettings,
    InvalidArguments,
    Job,
    JobState,
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
    assert len(JobState) == 11  # ten states plus client-side unsubmitted
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
    data["custom"] = "yes"
    back = Job.from_dict(data)
    assert back.state is JobState.FAILED and back.to_dict()["custom"] == "yes"


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
