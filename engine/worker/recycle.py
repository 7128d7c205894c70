"""Recycling: when a worker should retire (max_jobs, max_rss_mib, max_age_s).

A retiring worker stops claiming like a stopping one, lets its jobs finish within
shutdown_grace_s and exits 0: its supervisor (Kubernetes, systemd, Docker) starts a fresh one.
"""

from __future__ import annotations

import os
import random
import resource
import sys
import time

from ..settings import EngineSettings

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_mib() -> float:
    """Return this process's resident memory now (Linux), else its peak, in MiB."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES / (1 << 20)
    except (OSError, IndexError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


class Recycler:
    """Tell when a worker is due to retire, and why."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.started = time.monotonic()
        # Up to 10% later than max_age_s: workers started together do not all retire at once.
        self.age_limit_s = settings.recycle.max_age_s * (1 + random.random() / 10)

    def reason(self, claimed: int) -> str | None:
        """Return why the worker should retire now (None: it should not), as key=value text."""
        s = self.settings.recycle
        if s.max_jobs and claimed >= s.max_jobs:
            return f"reason=max_jobs jobs={claimed} max_jobs={s.max_jobs}"
        if s.max_rss_mib:
            rss = rss_mib()
            if rss > s.max_rss_mib:
                return f"reason=max_rss rss_mib={rss:.0f} max_rss_mib={s.max_rss_mib:g}"
        if s.max_age_s:
            age_s = time.monotonic() - self.started
            if age_s > self.age_limit_s:
                return f"reason=max_age age_s={age_s:.0f} max_age_s={s.max_age_s:g}"
        return None
