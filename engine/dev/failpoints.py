"""Failpoints: make a worker exit at a critical window, for reliability tests.

Set JOBSITE_FAILPOINTS to comma-separated names, each optionally with a probability:
`after_claim`, `after_begin:0.05`, `after_return`, `before_retry`, `before_dead`,
`after_promote`, `during_handback`. The process then exits with status 86 (os._exit: no cleanup,
no flush) when it reaches that window. Unset, every check is one dict lookup.

`bug_in_flush`, `bug_in_upkeep` and `bug_in_cleaner` raise an unexpected exception in that loop
instead, to prove that a loop dying of a bug takes the whole worker down.
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
BUGS = frozenset(("bug_in_flush", "bug_in_upkeep", "bug_in_cleaner"))
log = logging.getLogger("engine.failpoints")


def _parse(spec: str) -> dict[str, float]:
    active: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, prob = item.partition(":")
        if name not in WINDOWS | BUGS:
            known = ", ".join(sorted(WINDOWS | BUGS))
            raise ValueError(f"unknown failpoint {name!r}; known: {known}")
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


def bug(name: str) -> None:
    """Raise an unexpected exception if failpoint `name` is active (and its dice say so)."""
    prob = _ACTIVE.get(name)
    if prob is not None and random.random() < prob:
        raise RuntimeError(f"failpoint {name}: an injected bug")
