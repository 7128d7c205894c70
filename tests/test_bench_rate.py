"""The benchmark's steady throughput: a slow start is left out, and a short run keeps its span."""

from __future__ import annotations

from bench.collect import ProbeTotals
from bench.probe import MARK_EVERY


def _totals(times: list[float]) -> ProbeTotals:
    """Totals of one process whose starts came at `times` (as bench.probe records them)."""
    marks = [t for i, t in enumerate(times, 1) if i % MARK_EVERY == 0]
    return ProbeTotals(len(times), times[0], times[-1], 1, marks=marks)


def test_the_first_tenth_of_a_run_is_left_out_of_its_rate() -> None:
    slow = [i / 1_000 for i in range(2_000)]  # 2,000 starts at 1,000/s
    fast = [2.0 + i / 10_000 for i in range(18_000)]  # then 18,000 at 10,000/s
    totals = _totals(slow + fast)
    assert round(totals.count / totals.span_s) == 5_263  # the whole span: the slow start counts
    assert round(totals.steady_rate()) == 10_000  # from the start that ended the first 10 %


def test_a_run_too_short_to_leave_a_share_out_keeps_its_whole_span() -> None:
    times = [i / 1_000 for i in range(1_000)]  # 10 marks: fewer than 20
    totals = _totals(times)
    assert totals.steady_rate() == totals.count / totals.span_s
