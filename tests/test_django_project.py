"""The Django project loads and passes Django's system checks."""

from __future__ import annotations

import os
import subprocess
import sys


def test_manage_check_passes() -> None:
    proc = subprocess.run(
        [sys.executable, "manage.py", "check", "--fail-level", "WARNING"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SQLITE_PATH": ":memory:"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "no issues" in proc.stdout
