"""The README's main command runs the demo end to end."""

from __future__ import annotations

import os
import subprocess
import sys

from engine.devserver import RedisServer, free_port


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


def test_main_command_smoke(redis_server: RedisServer, tmp_path: object) -> None:
    env = {
        **os.environ,
        "REDIS_URL": redis_server.url.replace("/0", "/4"),
        "COLUMNS": "200",
        "SQLITE_PATH": f"{tmp_path}/smoke.sqlite3",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "jobsite.serve", "--smoke", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "admin user created" in proc.stdout and "password" in proc.stdout
    assert "completed jobs mirrored" in proc.stdout
