"""bin/bench-cluster: a small run end to end on a private cluster, and the table and model
from figures given."""

from __future__ import annotations

import pytest

from bench import cluster
from bench.cluster import MasterUse, Outcome


def _rows(text: str) -> list[dict[str, str]]:
    """Return the rows of the printed table, by header."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [
        dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in lines[1:]
    ]


def test_a_quick_run_reports_each_scenario_with_every_job_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cluster.main(["--quick", "--no-docs", "--jobs", "2000"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert [row["scenario"] for row in rows] == ["one queue", "6 queues"]
    for row in rows:
        assert row["masters"] == "3"
        assert row["jobs"] == row["ran"] == "2,000"
        cpu_ms = [float(v.replace(",", "")) for v in row["Redis CPU ms per master"].split(" / ")]
        assert len(cpu_ms) == 3 and all(ms >= 0 for ms in cpu_ms)
        assert max(cpu_ms) > 0
        assert float(row["busiest master µs/job"]) > 0
    assert sorted(rows[0]["queues per master"].split(" / ")) == ["0", "0", "1"]
    assert rows[1]["queues per master"] == "2 / 2 / 2"
    assert "enqueued 2,000 jobs into hot" in out
    assert "Queues by master, 3 masters: " in out


def _outcome(queues: tuple[str, ...], uses: list[tuple[int, int, float, int]]) -> Outcome:
    per_master = tuple(MasterUse(7000 + i, *use) for i, use in enumerate(uses))
    return Outcome(3, queues, 3000, 2, 3000, 0.5, per_master)


def test_the_table_and_the_model_come_from_the_figures() -> None:
    single = _outcome(("hot",), [(0, 0, 10_000.0, 0), (1, 3000, 60_000.0, 27_000), (0, 0, 0.0, 0)])
    spread = _outcome(
        ("hot1", "hot5", "hot0", "hot3", "hot2", "hot6"),
        [(2, 1000, 30_000.0, 9_000), (2, 1000, 20_000.0, 9_000), (2, 1000, 25_000.0, 9_100)],
    )
    assert single.busiest_us_per_job == 20.0
    assert single.ceiling_jobs_s == 50_000.0  # 1e6 / 20 µs
    assert spread.busiest_us_per_job == 30.0
    assert spread.ceiling_jobs_s == 100_000.0  # 3 masters x 1e6 / 30 µs
    assert single.evenness == pytest.approx(18 / 7)  # 60 ms over a mean of 70 / 3
    assert spread.evenness == pytest.approx(1.2)
    text = cluster.table([single, spread])
    assert (
        "| 3 | one queue | 0 / 1 / 0 | 3,000 | 3,000 | 2 | 6,000 | 10 / 60 / 0 | 0.0 / 27.0 / 0.0"
        " | 2.57 | 12% | 20.0 | 50,000 |" in text
    )
    assert "| 3 | 6 queues | 2 / 2 / 2 |" in text
    assert "| 30 / 20 / 25 | 9.0 / 9.0 / 9.1 | 1.20 | 6% | 30.0 | 100,000 |" in text
    reading = cluster.reading([single, spread])
    assert "one queue put 86% of the cluster's Redis CPU on one master" in reading
    assert "50,000 jobs/s for one queue and 100,000 for the spread (2.0x)" in reading
    assert "no master was near a full core" in reading


def test_the_spread_keeps_two_queues_on_every_master() -> None:
    owners = {"hot0": 1, "hot1": 1, "hot2": 1, "hot3": 2, "hot4": 3, "hot5": 2, "hot6": 3}
    assert cluster.pick_queues(owners.__getitem__, 3, 2) == [
        "hot0", "hot1", "hot3", "hot4", "hot5", "hot6"
    ]  # fmt: skip
    assert cluster.split_jobs(10, ["a", "b", "c"]) == {"a": 4, "b": 3, "c": 3}
