"""The README's main command: web app, worker, mirror and demo jobs, on a private Redis if needed.

`python -m jobsite.serve [--port 8000] [--smoke]`: migrates the database (SQLite by default),
creates an `admin` user and prints its password once, starts `manage.py runworker` and the web
server, and feeds demo jobs so the admin shows life at once. `--smoke` checks it all comes up,
then stops.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from rich.console import Console

from engine import Client, EngineSettings
from engine.devserver import RedisServer

from .demo import demo_jobs

console = Console()
ROOT = Path(__file__).resolve().parent.parent


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


def create_admin() -> None:
    """Create the `admin` superuser once and print its password (it is never shown again)."""
    password = secrets.token_urlsafe(12)
    code = (
        "from django.contrib.auth.models import User\n"
        "import sys\n"
        "if User.objects.filter(username='admin').exists(): sys.exit(3)\n"
        f"User.objects.create_superuser('admin', 'admin@localhost', {password!r})\n"
    )
    status = subprocess.run(manage("shell", "-v", "0", "-c", code), check=False).returncode
    if status == 0:
        console.print(
            f"[bold]admin user created[/]: username [bold]admin[/], password [bold]{password}[/]"
            " (shown once)"
        )
    elif status == 3:
        console.print("admin user exists (its password was printed when it was created)")
    else:
        raise SystemExit("could not create the admin user")


async def feed(settings: EngineSettings, rounds: int, pause_s: float) -> None:
    """Enqueue the demo mix `rounds` times, `pause_s` apart."""
    async with Client(settings) as client:
        for n in range(rounds):
            jobs = await client.enqueue_many(demo_jobs())
            console.print(f"fed {len(jobs)} demo jobs (round {n + 1})")
            await asyncio.sleep(pause_s)


def wait_http(url: str, timeout_s: float) -> int:
    """Return the status of GET `url` once the server answers."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return int(response.status)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def smoke_check(timeout_s: float = 30) -> int:
    """Wait until the mirror wrote finished demo jobs into the database; print the count."""
    code = (
        "from jobsite.jobs.models import Job; print(Job.objects.filter(state='completed').count())"
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(
            manage("shell", "-c", code), capture_output=True, text=True, check=True
        )
        count = int((out.stdout.strip().splitlines() or ["0"])[-1])
        if count > 0:
            console.print(f"smoke check: {count} completed jobs mirrored")
            return 0
        time.sleep(0.5)
    console.print("smoke check failed: no completed job reached the database")
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--smoke", action="store_true", help="start, check, stop")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
    (ROOT / "var").mkdir(exist_ok=True)
    server = None
    if not os.environ.get("REDIS_URL"):
        server = RedisServer().start()
        os.environ["REDIS_URL"] = server.url
        console.print(f"started a private redis-server at {server.url}")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        subprocess.run(manage("migrate", "--noinput", "-v", "0"), check=True)
        create_admin()
        procs.append(subprocess.Popen(manage("runworker", "--concurrency", "20")))
        procs.append(subprocess.Popen(manage("runserver", f"127.0.0.1:{args.port}", "--noreload")))
        wait_http(f"http://127.0.0.1:{args.port}/admin/login/", 30)
        console.print(f"Jobsite is up: http://127.0.0.1:{args.port}/admin/ (Ctrl-C to stop)")
        settings = EngineSettings.from_url(os.environ["REDIS_URL"])
        if args.smoke:
            asyncio.run(feed(settings, rounds=1, pause_s=0))
            return smoke_check()
        asyncio.run(feed(settings, rounds=1_000_000, pause_s=10))
    except KeyboardInterrupt:
        pass
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
