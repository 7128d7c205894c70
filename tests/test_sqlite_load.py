"""SQLite under load: 20 API clients for 12 s against `bin/run`'s server, loops running.

The server (Daphne), the worker with its mirror, relay and reconcile loops, and the demo feed
all write to one SQLite file; no request may fail with a server error ("database is locked").
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from engine.dev.devserver import RedisServer, free_port
from tests import serving

pytestmark = pytest.mark.chaos
CLIENTS = 20
DURATION_S = 12.0
ROOT = Path(__file__).resolve().parents[1]


def _make_token(env: dict[str, str]) -> str:
    code = (
        "from django.contrib.auth.models import User\n"
        "from jobsite.jobs.models import ApiToken\n"
        "from jobsite.jobs.api.tokens import issue\n"
        "user = User.objects.create_superuser('loader', 'l@example.com', 'x')\n"
        "row = ApiToken(user=user, name='load')\n"
        "key = issue(row)\n"
        "row.save()\n"
        "print('KEY', key)\n"
    )
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0"],
        input=code,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    ).stdout
    return next(line.split()[1] for line in out.splitlines() if line.startswith("KEY "))


def _hammer(base: str, key: str, stop_at: float, statuses: Counter[int], n: int) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
        i = 0
        while time.monotonic() < stop_at:
            i += 1
            if i % 4 == 0:
                r = http.post("/api/v1/jobs", json={"task": "demo.send_email", "args": [f"u{n}@x"]})
            elif i % 4 == 1:
                r = http.get("/api/v1/jobs", params={"limit": 20})
            elif i % 4 == 2:
                r = http.get("/api/v1/queues")
            else:
                r = http.get("/api/v1/stats", params={"minutes": 10})
            statuses[r.status_code] += 1


def test_twenty_clients_for_twelve_seconds_get_no_server_error(tmp_path: Path) -> None:
    port = free_port()
    with RedisServer() as redis_server:
        env = {
            **os.environ,
            "REDIS_URL": redis_server.url,
            "SQLITE_PATH": str(tmp_path / "load.sqlite3"),
            "COLUMNS": "200",
        }
        env.pop("DJANGO_SETTINGS_MODULE", None)
        log = tmp_path / "serve.log"
        proc = serving.start(env, port, log)
        try:
            serving.wait_up(proc, log)
            key = _make_token({**env, "JOBSITE_TASK_MODULES": "demo.demo_tasks"})
            statuses: Counter[int] = Counter()
            stop_at = time.monotonic() + DURATION_S
            threads = [
                threading.Thread(
                    target=_hammer, args=(f"http://127.0.0.1:{port}", key, stop_at, statuses, n)
                )
                for n in range(CLIENTS)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    text = log.read_text()
    print(f"statuses={dict(statuses)} requests={sum(statuses.values())}")
    assert sum(statuses.values()) > CLIENTS * 10
    assert not [s for s in statuses if s >= 500], (dict(statuses), text[-3000:])
    assert set(statuses) <= {200, 201}, dict(statuses)
    assert "database is locked" not in text
