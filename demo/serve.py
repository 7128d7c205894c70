"""The README's main command: web app, worker, mirror and demo jobs, on a private Redis if needed.

`python -m demo.serve [--port 8000] [--smoke]`: migrates the database (SQLite by default),
collects static files, creates an `admin` user and prints its password once, starts
`manage.py runworker` and Daphne (a production ASGI server; WhiteNoise serves static files),
and feeds demo jobs so the admin shows life at once. `--smoke` checks it all comes up, then
stops. SIGTERM or SIGINT stops everything it started, within the worker's shutdown grace.

Its local-only conveniences are explicit, in `LOCAL_ENV`: it listens on 127.0.0.1 over plain
HTTP, keeps a generated secret key in var/secret_key unless DJANGO_SECRET_KEY is set, and loads
the demo's tasks.
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

from engine import Client, EngineSettings, JobState, Reconnect, RedisServer, RedisUnavailable

from .demo import demo_jobs
from .localkey import local_secret_key

console = Console()
ROOT = Path(__file__).resolve().parent.parent


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


# Stop waiting for a child this long after SIGTERM, then kill it (the worker's own grace
# for running jobs is shorter).
STOP_GRACE_S = 30.0


def local_env() -> dict[str, str]:
    """Return the environment of this loopback-only demo: what it turns on, said out loud."""
    env = {"DJANGO_HTTPS": "0", "JOBSITE_TASK_MODULES": "demo.demo_tasks"}
    if not os.environ.get("DJANGO_SECRET_KEY"):
        path = ROOT / "var" / "secret_key"
        env["DJANGO_SECRET_KEY"] = local_secret_key(path)
        console.print(f"using the local secret key in {path} (set DJANGO_SECRET_KEY in production)")
    return env


def prepare() -> None:
    """Migrate, collect static files and create the admin user, in this process.

    One Django start-up for the three (each took a `manage.py` process of its own, about
    2 s of imports apiece); the connections close before the children start.
    """
    import django
    from django.core.management import call_command
    from django.db import connections

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)
    create_admin()
    connections.close_all()


def create_admin() -> None:
    """Create the `admin` superuser once and print its password (it is never shown again)."""
    from django.contrib.auth.models import User

    if User.objects.filter(username="admin").exists():
        console.print("admin user exists (its password was printed when it was created)")
        return
    password = secrets.token_urlsafe(12)
    User.objects.create_superuser("admin", "admin@localhost", password)
    console.print(
        f"[bold]admin user created[/]: username [bold]admin[/], password [bold]{password}[/]"
        " (shown once)"
    )


async def feed(settings: EngineSettings, rounds: int, pause_s: float) -> None:
    """Enqueue the demo mix `rounds` times, `pause_s` apart; wait out Redis stalls and restarts.

    A laptop that slept or a Redis restarted must not stop the demo: the round is tried again
    (capped backoff) until Redis answers; the web server and the worker ride it out themselves.
    """
    retry = Reconnect("demo_feed", cap_s=2.0)
    async with Client(settings) as client:
        n = 0
        while n < rounds:
            try:
                jobs = await client.enqueue_many(demo_jobs())
            except RedisUnavailable as exc:
                if not retry.failures:
                    console.print(f"Redis is not answering; the demo feed waits for it ({exc})")
                await retry.failed(exc)
                continue
            if retry.failures:
                console.print(f"Redis answers again after {retry.failures} tries")
            retry.ok()
            n += 1
            console.print(f"fed {len(jobs)} demo jobs (round {n})")
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
    from django.db import connections

    from jobsite.jobs.models import JobRecord

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        count = JobRecord.objects.filter(state=JobState.COMPLETED).count()
        connections.close_all()
        if count > 0:
            console.print(f"smoke check: {count} completed jobs mirrored")
            return 0
        time.sleep(0.5)
    console.print("smoke check failed: no completed job reached the database")
    return 1


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # one way out: the `finally` of main() stops everything


def stop(procs: list[subprocess.Popen[bytes]], server: RedisServer | None) -> None:
    """Stop the children (SIGTERM, then SIGKILL after the grace) and the private Redis."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    running = [p for p in procs if p.poll() is None]
    if running or server is not None:
        console.print("stopping: worker, web server" + (", redis-server" if server else ""))
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in running:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if server is not None:
        server.cleanup()
    console.print("stopped")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--smoke", action="store_true", help="start, check, stop")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _terminate)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")
    (ROOT / "var").mkdir(exist_ok=True)
    os.environ.update(local_env())
    server = None
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if not os.environ.get("REDIS_URL"):
            # Known to stop() before it starts: a SIGTERM during start() still stops it.
            server = RedisServer()
            server.start()
            os.environ["REDIS_URL"] = server.url
            console.print(f"started a private redis-server at {server.url}")
        prepare()
        procs.append(subprocess.Popen(manage("runworker", "--concurrency", "20")))
        daphne = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(args.port)]
        procs.append(subprocess.Popen([*daphne, "demo.asgi:application"]))
        wait_http(f"http://127.0.0.1:{args.port}/admin/login/", 30)
        base = f"http://127.0.0.1:{args.port}"
        console.print(
            f"Jobsite is up: dashboard {base}/dashboard/, admin {base}/admin/ (Ctrl-C to stop)"
        )
        settings = EngineSettings.from_url(os.environ["REDIS_URL"])
        if args.smoke:
            asyncio.run(feed(settings, rounds=1, pause_s=0))
            return smoke_check()
        asyncio.run(feed(settings, rounds=1_000_000, pause_s=10))
    except KeyboardInterrupt:
        pass
    finally:
        stop(procs, server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
