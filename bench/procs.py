"""Process lifecycle: the private redis-server and the worker process groups.

Every child runs in its own session (so its own process group): SIGTERM to the leader first,
SIGKILL to the process group after a grace period. Nothing is ever matched by name.

"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis


@dataclass(frozen=True)
class RedisServer:
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(run_dir: Path, timeout_s: float = 10.0) -> RedisServer:
    port = free_port()
    if port == 6379:
        port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--dir", str(run_dir), "--loglevel", "warning"]
    log = (run_dir / "redis-server.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    server = RedisServer(port, proc)
    wait_ping(server.url, proc, timeout_s)
    return server


def wait_ping(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """Wait until a PING to `url` (served by `proc`) answers; stop `proc` if it never does."""
    deadline = time.monotonic() + timeout_s
    client = redis.Redis.from_url(url)
    try:
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    stop_group(proc)
                    raise RuntimeError(f"{proc.args!r} did not answer PING on {url}") from None
                time.sleep(0.05)
    finally:
        client.close()


def start_group(
    argv: list[str], env: dict[str, str], cwd: Path, log: Path
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    return _signal_group(pgid, 0)


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    stop_groups([proc], grace_s)


def stop_groups(procs: list[subprocess.Popen[bytes]], grace_s: float = 10.0) -> None:
    """SIGTERM each group's leader (supervisors such as Dramatiq's and taskiq's pass it on to
    their children; signalling the whole group would hit children twice), wait until the whole
    group is gone, then SIGKILL the process group, whatever is left, after grace_s."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        while time.monotonic() < deadline:
            proc.poll()
            if proc.returncode is not None and not _group_alive(proc.pid):
                break
            time.sleep(0.05)
        _signal_group(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def wait_exit(procs: list[subprocess.Popen[bytes]], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(proc.poll() is not None for proc in procs):
            return True
        time.sleep(0.05)
    return False
