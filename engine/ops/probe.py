"""Probes of a worker from outside its process: a status file per worker, and its reader.

The worker's liveness thread writes `<status dir>/<pid>.json` every quarter of the liveness
window: when its thread last beat, when its liveness key was last renewed in Redis, when the
worker's event loop last ran a callback, and whether the worker claims. A probe on the same
host (Kubernetes exec probe, systemd watchdog script, Docker HEALTHCHECK) reads those files; it
needs no Redis, no secret and no network, so it answers even when Redis is gone.

- live: the thread beat within two windows (the process is neither frozen nor dead). A worker
  whose Redis is away stays live: restarting it would not bring Redis back.
- ready: live, its liveness key was renewed within the window (Redis answers), its event loop
  ran within the window (not blocked), and it claims (not quiet, not stopping).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..settings import EngineSettings


def status_dir(settings: EngineSettings) -> Path:
    """Return the directory of this host's worker status files (settings.status_dir, or a
    per-prefix directory under the system's temporary directory)."""
    if settings.status_dir:
        return Path(settings.status_dir)
    return Path(tempfile.gettempdir()) / f"jobsite-workers-{settings.prefix}"


@dataclass(slots=True)
class Status:
    """What a worker's liveness thread writes about its worker (times are Unix seconds)."""

    worker: str
    pid: int
    window_s: float
    beat_at: float = 0.0
    renewed_at: float = 0.0
    loop_at: float = 0.0
    # "claiming", "quiet", "stopping" or "retiring" (why it no longer claims).
    state: str = "claiming"


class StatusFile:
    """Write one worker's status file atomically (a reader never sees half of it)."""

    def __init__(self, settings: EngineSettings, worker_id: str) -> None:
        self.dir = status_dir(settings)
        self.path = self.dir / f"{os.getpid()}.json"
        self.status = Status(worker_id, os.getpid(), settings.liveness_window_s)

    def write(self) -> None:
        """Write the status now; a full or read-only disk never stops the worker."""
        data = json.dumps(dataclasses.asdict(self.status))
        tmp = self.path.with_suffix(".tmp")
        try:
            self.dir.mkdir(mode=0o755, parents=True, exist_ok=True)
            tmp.write_text(data)
            os.replace(tmp, self.path)
        except OSError:
            pass

    def remove(self) -> None:
        """Remove the file (a worker that exits is no longer probed)."""
        with contextlib.suppress(OSError):
            self.path.unlink()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_statuses(directory: Path) -> list[Status]:
    """Return the status of every worker process of this host that still runs."""
    out: list[Status] = []
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.json")):
        try:
            status = Status(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue  # being replaced, or not ours
        if _running(status.pid):
            out.append(status)
        else:  # a worker killed before it could remove its file
            with contextlib.suppress(OSError):
                path.unlink()
    return out


def judge(status: Status, ready: bool, now: float | None = None) -> str | None:
    """Return why `status` fails the probe (None: it passes)."""
    now = time.time() if now is None else now
    window = status.window_s
    who = f"worker={status.worker}"
    beat_age = now - status.beat_at
    # Two windows: a beat may wait for a renewal that times out (half a window) and a backoff
    # (at most a quarter window, engine/worker/liveness.py).
    if beat_age > 2 * window:
        return f"not live {who}: its liveness thread last beat {beat_age:.1f}s ago (frozen?)"
    if not ready:
        return None
    renewed_age = now - status.renewed_at
    if renewed_age > window:
        return f"not ready {who}: redis has not answered for {renewed_age:.1f}s"
    loop_age = now - status.loop_at
    if loop_age > window:
        return f"not ready {who}: its event loop has not run for {loop_age:.1f}s (blocked?)"
    if status.state != "claiming":
        return f"not ready {who}: it does not claim (state={status.state})"
    return None


def probe(directory: Path, ready: bool, pid: int | None = None) -> tuple[bool, str]:
    """Probe this host's workers (or the one of `pid`): (passed, a one-line reason)."""
    statuses = [s for s in read_statuses(directory) if pid is None or s.pid == pid]
    kind = "ready" if ready else "live"
    if not statuses:
        return False, f"no worker process found in {directory}"
    for status in statuses:
        reason = judge(status, ready)
        if reason is not None:
            return False, reason
    workers = ",".join(s.worker for s in statuses)
    return True, f"{kind} workers={workers}"
