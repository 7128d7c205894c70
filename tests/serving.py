"""Start the README's main command (`python -m demo.serve`) for a test and wait for it.

Or its WSGI variant (`start_wsgi`, `python -m tests.serving --port N`): the same demo under
`manage.py runserver` without Daphne (tests/wsgi_settings.py), which serves no websocket.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
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


def start_wsgi(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    """Start the demo under WSGI (`main` below) on `port`, its output in the file `log`."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.serving", "--port", str(port)],
            env={**env, "DJANGO_SETTINGS_MODULE": "tests.wsgi_settings"},
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # one way out: the `finally` of main() stops the children


def main() -> int:
    """Prepare the demo as `demo.serve` does, then run a worker and `runserver` (WSGI) until
    SIGTERM; REDIS_URL names a running Redis."""
    from demo import serve

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.wsgi_settings")
    os.environ.update(serve.local_env())
    procs: list[subprocess.Popen[bytes]] = []
    try:
        serve.prepare()
        procs.append(subprocess.Popen(serve.manage("runworker", "--concurrency", "4")))
        runserver = serve.manage("runserver", "--noreload", f"127.0.0.1:{args.port}")
        procs.append(subprocess.Popen(runserver))
        base = f"http://127.0.0.1:{args.port}"
        serve.wait_http(f"{base}/admin/login/", 60)
        print(f"Jobsite is up (WSGI): dashboard {base}/dashboard/", flush=True)
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        return 1  # a child died
    except KeyboardInterrupt:
        return 0
    finally:
        serve.stop(procs, None)


if __name__ == "__main__":
    sys.exit(main())
