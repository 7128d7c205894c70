"""Instructions a one-job enqueue script costs at the server: Jobsite's submit beside Dramatiq's.

    .venv-bench/bin/python -m bench.script_cost [--calls 2000] [--no-docs]

Time at the server is noisy on a shared machine (one run to the next differed by a quarter);
instructions are not. Each script runs `--calls` times, one call at a time, against a
`redis-server` under `valgrind --tool=callgrind`; a run of the same server with no calls is
taken off, and the difference divided by the calls. The scripts and their arguments are the
ones each system sends for a one-argument no-op task (captured from a real enqueue on a plain
redis-server first): Jobsite's submit-13.lua and Dramatiq's dispatch.lua `enqueue`, each beside
an EVALSHA of `return {0}` with its arguments (the floor every script pays: reading the
request, the call, the reply).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bench import procs
from bench.report import publish
from engine.dev.devserver import RedisServer, free_port


def _captured(server: RedisServer, send: Callable[[], Any]) -> tuple[str, list[Any]]:
    """Run `send` once; return the source and EVALSHA arguments of the script it called."""
    from engine.transport.held import HeldConnections

    sent: list[tuple[Any, ...]] = []
    spied = [(redis.Redis, redis.Redis.execute_command)]
    spied.append((HeldConnections, HeldConnections.execute_command))  # type: ignore[arg-type]

    def spy(original: Callable[..., Any]) -> Callable[..., Any]:
        def record(self: Any, *args: Any, **options: Any) -> Any:
            if args and args[0] == "EVALSHA":
                sent.append(args)
            return original(self, *args, **options)

        return record

    for owner, original in spied:
        owner.execute_command = spy(original)  # type: ignore[method-assign]
    try:
        send()
    finally:
        for owner, original in spied:
            owner.execute_command = original  # type: ignore[method-assign]
    known = _scripts(redis.Redis.from_url(server.url))
    for command in reversed(sent):  # the last: the enqueue (Dramatiq asks its limits first)
        if command[1] in known:
            return known[command[1]], list(command[2:])
    raise RuntimeError("no EVALSHA of a known script was sent")


def _scripts(client: redis.Redis) -> dict[str, str]:
    """Return SHA -> source of every script Jobsite and Dramatiq have."""
    from dramatiq.brokers.redis import _scripts as dramatiq_scripts

    from engine.seam.luasrc import _SHAS, _SOURCES

    known = {sha: _SOURCES[fmt][verb][1] for fmt, by in _SHAS.items() for verb, sha in by.items()}
    for source in dramatiq_scripts.values():
        known[client.script_load(source)] = source
    return known


def _jobsite_call(server: RedisServer) -> tuple[str, list[Any]]:
    from bench.peers.jobsite_tasks import noop
    from engine import EngineSettings, SyncClient

    with SyncClient(EngineSettings(redis_url=server.url)) as client:
        return _captured(server, lambda: client.enqueue(noop, 0.0))


def _dramatiq_call(server: RedisServer) -> tuple[str, list[Any]]:
    os.environ["BENCH_REDIS_URL"] = server.url
    from bench.peers.dramatiq_tasks import noop

    return _captured(server, lambda: noop.send(0.0))


def _with_id(args: list[Any], n: int, old: str) -> list[Any]:
    """Return `args` with the job id `old` made unique for call `n` (a new job each call)."""
    new = f"{n:0{len(old)}d}"[-len(old) :]
    return [
        a.replace(old.encode(), new.encode()) if isinstance(a, bytes) else
        a.replace(old, new) if isinstance(a, str) else a
        for a in args
    ]  # fmt: skip


def instructions(source: str, args: list[Any], unique: str, calls: int) -> int:
    """Return the server's instructions per EVALSHA of `source` with `args` (see module doc)."""
    totals = []
    for n in (0, calls):
        folder = Path(tempfile.mkdtemp(prefix="bench-callgrind-"))
        port = free_port()
        out = folder / "callgrind.out"
        proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "redis-server",
             "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        procs.wait_ping(f"redis://127.0.0.1:{port}/0", proc, timeout_s=60)
        client = redis.Redis(port=port)
        sha = client.script_load(source)
        for i in range(n):
            client.evalsha(sha, *_with_id(args, i, unique))
        client.close()
        proc.terminate()
        proc.wait()
        totals.append(int(_first(r"(?m)^(?:totals|summary): (\d+)", out.read_text())))
        shutil.rmtree(folder, ignore_errors=True)
    return (totals[1] - totals[0]) // calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--no-docs", action="store_true")
    opts = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind not found: apt-get install valgrind")
    server = RedisServer().start()
    try:
        jobsite_source, jobsite_args = _jobsite_call(server)
        dramatiq_source, dramatiq_args = _dramatiq_call(server)
    finally:
        server.stop()
    job_id = _found(r'"([0-9a-f]{32})"', jobsite_args)
    message_id = _found(r'"redis_message_id":\s*"([0-9a-f-]{36})"', dramatiq_args)
    systems = [
        ("Jobsite submit-13.lua, one no-op job", jobsite_source, jobsite_args, job_id),
        ("Dramatiq dispatch.lua `enqueue`", dramatiq_source, dramatiq_args, message_id),
    ]
    counts = {}
    for label, source, args, unique in systems:
        floor = instructions("return {0}", args, unique, opts.calls)
        total = instructions(source, args, unique, opts.calls)
        counts[label] = (total, floor)
        print(f"{label}: {total:,} instructions a call, {floor:,} of them the floor", flush=True)
    lines = [
        "## Instructions at the server for a one-job enqueue",
        "",
        f"`python -m bench.script_cost`, {time.strftime('%Y-%m-%d %H:%M')}: {opts.calls:,} calls of"
        f" each script, one at a time, against {_server_version()} under callgrind;"
        " instructions a call, a run of the same server with no calls taken off. The floor is"
        " an EVALSHA of `return {0}` with the same arguments (reading the request, the call,"
        " the reply); the script's own is the rest.",
        "",
        "| script | instructions a call | the floor | the script's own "
        "| against Dramatiq's (all / own) |",
        "|---|---:|---:|---:|---:|",
    ]
    ref_total, ref_floor = counts[systems[1][0]]
    for label, *_ in systems:
        total, floor = counts[label]
        lines.append(
            f"| {label} | {total:,} | {floor:,} | {total - floor:,} "
            f"| {total / ref_total:.2f} / {(total - floor) / (ref_total - ref_floor):.2f} |"
        )
    publish("script-cost", "\n".join(lines), docs=not opts.no_docs)


def _found(pattern: str, args: list[Any]) -> str:
    """Return the first group of `pattern` in the arguments (the id a call must make unique)."""
    return _first(pattern, " ".join(a.decode() if isinstance(a, bytes) else str(a) for a in args))


def _first(pattern: str, text: str) -> str:
    """Return the first group of `pattern` in `text`; a RuntimeError naming both if none."""
    match = re.search(pattern, text)
    if match is None:
        raise RuntimeError(f"{pattern!r} not found in {text[:300]!r}")
    return match[1]


def _server_version() -> str:
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    return "Redis " + _first(r"v=(\S+)", out)


if __name__ == "__main__":
    main()
