"""RQ's no-op task (the worker imports it by its dotted name)."""

from __future__ import annotations

from bench import probe


def noop(t_enqueued: float) -> None:
    probe.hit(t_enqueued)
