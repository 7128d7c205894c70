"""Start the README's main command (`python -m demo.serve`) for a test and wait for it."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    """Start the server on `port`, its output in the file `log` (a full pipe would block it)."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "demo.serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )


def wait_up(proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 90) -> str:
    """Wait for "Jobsite is up"; return the admin password it printed."""
    deadline = time.monotonic() + timeout_s
    while "Jobsite is up" not in log.read_text():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    match = re.search(r"password (\S+) \(shown once\)", log.read_text())
    assert match, log.read_text()
    return match.group(1)
