"""Failpoints: make a worker exit at a critical window, for reliability tests.

Set JOBSITE_FAILPOINTS to comma-separated names, each optionally with a probability:
`after_claim`, `after_begin:0.05`, `after_return`, `before_retry`, `before_dead`,
`after_promote`, `during_handback`. The process then exits with status 86 (os._exit: no cleanup,
no flush) when it reaches that window. Unset, every check is one dict lookup.
"""

from __future__ import annotations

import logging
import os
import random

EXIT_STATUS = 86
WINDOWS = frozenset(
    (
        "after_claim",
        "after_begin",
        "after_return",
        "before_retry",
        "before_dead",
        "after_promote",
        "during_handback",
    )
)
log = logging.getLogger("engine.failpoints")


def _parse(spec: str) -> dict[str, float]:
    active: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, prob = item.partition(":")
        if name not in WINDOWS:
            raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(sorted(WINDOWS))}")
        active[name] = float(prob) if prob else 1.0
    return active


_ACTIVE = _parse(os.environ.get("JOBSITE_FAILPOINTS", ""))


def hit(name: str) -> None:
    """Exit the process at once if failpoint `name` is active (and its dice say so)."""
    prob = _ACTIVE.get(name)
    if prob is not None and random.random() < prob:
        log.warning("failpoint hit name=%s pid=%d", name, os.getpid())
        logging.shutdown()
        os._exit(EXIT_STATUS)
