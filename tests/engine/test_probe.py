"""Worker probes from outside the process (`python -m engine probe`), on real worker processes:
healthy, Redis blackholed, event loop blocked, process frozen by SIGSTOP."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine import Client, EngineSettings
from engine.ops.probe import read_statuses

from ..faultproxy import FaultProxy
from . import chaos_tasks as ct
from .harness import WorkerProc
from .helpers import single_node

pytestmark = single_node


def probe(status_dir: Path, kind: str, pid: int) -> tuple[int, str]:
    """Run the probe as a platform would: exit status and its one line."""
    where = ["--status-dir", str(status_dir), "--pid", str(pid)]
    out = subprocess.run(
        [sys.executable, "-m", "engine", "probe", f"--{kind}", *where],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return out.returncode, out.stdout.strip()


def wait_probe(status_dir: Path, kind: str, pid: int, passed: bool, timeout_s: float = 15) -> str:
    """Wait until the probe passes (or fails); return its reason."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, reason = probe(status_dir, kind, pid)
        if (status == 0) == passed:
            return reason
        assert time.monotonic() < deadline, f"probe --{kind} still says: {reason}"
        time.sleep(0.2)


def start(url: str, tmp_path: Path, procs: list[WorkerProc]) -> tuple[WorkerProc, Path]:
    status_dir = tmp_path / "status"
    proc = WorkerProc(url, tmp_path / "ledger.jsonl", status_dir=status_dir).start()
    procs.append(proc)
    return proc, status_dir


def test_probe_healthy_then_frozen_by_sigstop(
    settings: EngineSettings, tmp_path: Path, procs: list[WorkerProc]
) -> None:
    proc, status_dir = start(settings.redis_url, tmp_path, procs)
    assert "ready workers=" in wait_probe(status_dir, "ready", proc.pid, True)
    assert probe(status_dir, "live", proc.pid)[0] == 0
    proc.signal(signal.SIGSTOP)
    try:
        reason = wait_probe(status_dir, "live", proc.pid, False)
        assert "not live" in reason and "frozen" in reason
        assert probe(status_dir, "ready", proc.pid)[0] == 1
    finally:
        proc.signal(signal.SIGCONT)
    wait_probe(status_dir, "ready", proc.pid, True)
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0
    status, reason = probe(status_dir, "live", proc.pid)
    assert status == 1 and "no worker process" in reason  # it removed its status file


def test_probe_redis_blackholed(
    settings: EngineSettings, tmp_path: Path, procs: list[WorkerProc]
) -> None:
    port = int(settings.redis_url.rsplit(":", 1)[1].split("/")[0])
    with FaultProxy(port) as proxy:
        proc, status_dir = start(proxy.url(), tmp_path, procs)
        wait_probe(status_dir, "ready", proc.pid, True)
        proxy.blackholed.set()
        reason = wait_probe(status_dir, "ready", proc.pid, False)
        assert "redis has not answered" in reason
        # Live all the same: a restart would not bring Redis back.
        assert probe(status_dir, "live", proc.pid)[0] == 0
        proxy.blackholed.clear()
        wait_probe(status_dir, "ready", proc.pid, True, timeout_s=30)


def test_a_short_window_keeps_a_worker_live_while_redis_is_away(
    settings: EngineSettings, tmp_path: Path, procs: list[WorkerProc]
) -> None:
    # A beat waits for a renewal that times out (half a window) and a backoff. With the
    # smallest window the settings allow, a backoff capped at 1 s let beats fall 1.2 s apart,
    # past the two windows (0.8 s) a live probe allows: a platform would restart a worker
    # whose Redis is away, which brings nothing back.
    window_s = 0.4
    port = int(settings.redis_url.rsplit(":", 1)[1].split("/")[0])
    with FaultProxy(port) as proxy:
        status_dir = tmp_path / "status"
        proc = WorkerProc(
            proxy.url(),
            tmp_path / "ledger.jsonl",
            status_dir=status_dir,
            liveness_window_s=window_s,
        ).start()
        procs.append(proc)
        wait_probe(status_dir, "ready", proc.pid, True)
        proxy.blackholed.set()
        wait_probe(status_dir, "ready", proc.pid, False)
        oldest_beat_s = 0.0
        deadline = time.monotonic() + 12 * window_s  # several renewals and backoffs
        while time.monotonic() < deadline:
            for status in read_statuses(status_dir):
                oldest_beat_s = max(oldest_beat_s, time.time() - status.beat_at)
            time.sleep(0.02)
        proxy.blackholed.clear()
    assert 0 < oldest_beat_s < 2 * window_s


async def test_probe_event_loop_blocked(
    settings: EngineSettings, tmp_path: Path, procs: list[WorkerProc]
) -> None:
    proc, status_dir = start(settings.redis_url, tmp_path, procs)
    wait_probe(status_dir, "ready", proc.pid, True)
    async with Client(settings) as client:
        await client.enqueue(ct.block_loop, 6.0)
    reason = wait_probe(status_dir, "ready", proc.pid, False)
    assert "event loop has not run" in reason
    assert probe(status_dir, "live", proc.pid)[0] == 0
    wait_probe(status_dir, "ready", proc.pid, True)


def test_probe_finds_no_worker(tmp_path: Path) -> None:
    status, reason = probe(tmp_path, "live", 1)
    assert status == 1 and "no worker process" in reason


@pytest.mark.parametrize("kind", ["live", "ready"])
def test_probe_needs_one_kind(tmp_path: Path, kind: str) -> None:
    both = subprocess.run(
        [sys.executable, "-m", "engine", "probe", "--live", "--ready"], capture_output=True
    )
    assert both.returncode == 2  # argparse: not allowed with
    assert probe(tmp_path, kind, 1)[0] == 1
