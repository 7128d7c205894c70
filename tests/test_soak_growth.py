"""bench/soak.py: RSS growth is read from the end of warm-up, once a share of the jobs is done and
a least time has gone by, both."""

from __future__ import annotations

from typing import Any

from bench.soak import WARM_FRACTION, WARM_MIN_S, growth

JOBS = 1_000_000


def samples(rate: int, rss_kib: list[int]) -> list[dict[str, Any]]:
    """Return a sample every 10 s of a run doing `rate` jobs a second."""
    return [
        {"t_s": 10.0 * n, "done": min(JOBS, rate * 10 * n), "rss_kib": rss}
        for n, rss in enumerate(rss_kib)
    ]


def test_a_fast_run_is_warm_only_once_the_least_time_is_gone() -> None:
    # 10 % of the jobs are done at 50 s; reconciliation's first pass adds memory at 70 s.
    rss = [100_000] * 7 + [110_000] * 50
    warm, last = growth(samples(2000, rss), JOBS)
    assert warm["t_s"] == WARM_MIN_S
    assert warm["done"] >= JOBS * WARM_FRACTION
    assert last["rss_kib"] - warm["rss_kib"] == 0


def test_a_slow_run_is_warm_once_its_share_of_the_jobs_is_done() -> None:
    warm, _ = growth(samples(100, [100_000] * 200), JOBS)
    assert warm["t_s"] == 1000.0  # 100,000 jobs at 100 a second, well past the least time


def test_a_run_shorter_than_the_least_time_is_warm_at_its_share_of_the_jobs() -> None:
    warm, last = growth(samples(2000, [100_000] * 12), 20_000)  # --quick: done in 10 s
    assert warm["t_s"] == 10.0
    assert last["t_s"] == 110.0
