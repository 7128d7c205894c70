"""The README's main command runs the demo end to end."""

from __future__ import annotations

import os
import subprocess
import sys

from engine.devserver import RedisServer


def test_demo_runs_once(redis_server: RedisServer) -> None:
    env = {**os.environ, "REDIS_URL": redis_server.url.replace("/0", "/3"), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "jobsite.demo", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "225 jobs finished" in out
    for expected in ("demo.send_email", "card declined", "dropped", "'completed_total': 223"):
        assert expected in out
