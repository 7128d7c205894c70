"""`bin/bench --only replica-acks`: its variant reaches the Jobsite adapter, its report has the
ratio of each figure (no run here: the benchmark itself is run by hand)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import replica_acks, run
from bench.peers import jobsite


def test_the_variant_settings_reach_the_worker_and_the_client() -> None:
    with replica_acks.jobsite_settings("replica_acks=1,replica_ack_timeout_ms=500"):
        argv = jobsite.worker_argv(Path("/venv/bin"), "redis://h/0", False, 0)
        sender = jobsite._Sender("redis://127.0.0.1:1/0")
    assert argv[-4:] == ["--set", "replica_acks=1", "--set", "replica_ack_timeout_ms=500"]
    assert (sender.settings.replica_acks, sender.settings.replica_ack_timeout_ms) == (1, 500)
    assert "--set" not in jobsite.worker_argv(Path("/venv/bin"), "redis://h/0", False, 0)


def test_the_report_gives_each_figure_and_its_ratio() -> None:
    base = {"enqueue_one": 4000.0, "latency_p50_ms": 1.0, "throughput_1": "no measurable span"}
    acked = {"enqueue_one": 3000.0, "latency_p50_ms": 1.25, "throughput_1": 900.0}
    text = replica_acks.markdown(
        {"jobsite": base, "jobsite (replica_acks=1)": acked}, "7.0.15", "bin/bench x", []
    )
    assert "| Enqueue one at a time (jobs/s) | 4,000 | 3,000 | 0.75x |" in text
    assert "| Latency p50 (ms) | 1.00 | 1.25 | 1.25x |" in text
    assert "| Throughput 1 proc (jobs/s) | no measurable span | 900 | n/a |" in text


def test_replica_acks_is_a_scenario_of_its_own() -> None:
    assert run.parse_args(["--only", "replica-acks", "--quick"]).only == "replica-acks"
    with pytest.raises(SystemExit):
        run.parse_args(["--only", "replica-acks", "--rtt-ms", "2"])
