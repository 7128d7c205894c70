"""Settings grouped by owner: each group is built from the flat fields (one default per value)
and checks itself as the settings are built; the flat names keep working everywhere."""

from __future__ import annotations

import dataclasses

import pytest

from engine import ConfigError, EngineSettings
from engine.settings import CleanerSettings, RecycleSettings, ShutdownSettings, StreamSettings


def test_each_group_holds_its_owners_values_from_the_flat_fields() -> None:
    s = EngineSettings(
        cleaner_batch=50,
        dlq_max_len=7,
        events_maxlen=2_000,
        events_group="",
        max_jobs=3,
        shutdown_grace_s=4.5,
        job_log_max_lines=9,
        replica_acks=1,
        replica_ack_timeout_ms=250,
    )
    assert s.cleaner == CleanerSettings(1.0, 50, 30 * 86_400, 7, 3600.0)
    assert s.stream == StreamSettings(2_000, "", 100_000)
    assert s.stream.emergency_maxlen == 4_000
    assert s.recycle == RecycleSettings(3, 0.0, 0.0) and s.recycle.on
    assert s.shutdown == ShutdownSettings(4.5, 5.0)
    assert s.job_log.max_lines == 9
    assert (s.replica.acks, s.replica.wait_s) == (1, 0.25)
    assert not EngineSettings().recycle.on and EngineSettings().replica.wait_s == 0.0


def test_a_replaced_field_rebuilds_its_group() -> None:
    s = dataclasses.replace(EngineSettings(), cleaner_interval_s=0.25, max_rss_mib=512.0)
    assert s.cleaner.interval_s == 0.25 and s.recycle.max_rss_mib == 512.0


@pytest.mark.parametrize(
    ("flat", "says"),
    [
        ({"cleaner_batch": 0}, "cleaner_batch must be positive"),
        ({"cleaner_interval_s": -1.0}, "cleaner_interval_s must be positive"),
        ({"dlq_max_len": -1}, "dlq_max_len must be 0 or more"),
        ({"events_maxlen": 0}, "events_maxlen must be positive"),
        ({"events_kept_without_group": -5}, "events_kept_without_group must be positive"),
        ({"max_age_s": -1.0}, "max_age_s must be 0 or more"),
        ({"shutdown_exit_s": 0}, "shutdown_exit_s must be positive"),
        ({"shutdown_grace_s": -1}, "shutdown_grace_s must be 0 or more"),
        ({"job_log_max_bytes": 0}, "job_log_max_bytes must be positive"),
        ({"replica_acks": True}, "replica_acks must be an int"),
        ({"replica_ack_timeout_ms": 0}, "replica_ack_timeout_ms must be a positive int"),
        ({"claim_batch": 0}, "claim_batch must be positive"),
    ],
)
def test_a_bad_value_is_refused_by_its_group_under_its_flat_name(
    flat: dict[str, object], says: str
) -> None:
    with pytest.raises(ConfigError, match=says):
        EngineSettings(**flat)  # type: ignore[arg-type]


def test_the_groups_are_not_arguments_nor_keys() -> None:
    with pytest.raises(TypeError):
        EngineSettings(cleaner=CleanerSettings(1.0, 1, 0, 0, 0.0))  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="unknown engine settings: cleaner"):
        EngineSettings.from_mapping({"CLEANER": {"BATCH": 5}})
    assert EngineSettings.from_mapping({"CLEANER_BATCH": 5}).cleaner.batch == 5
