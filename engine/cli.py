"""Command line: `python -m engine worker --queues a,b --concurrency N --burst`."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from .client import Client
from .errors import ConfigError, LoopCrashed, RedisUnavailable
from .ops.probe import probe, status_dir
from .seam.hashformat import move
from .settings import EngineSettings
from .task import Task, collect_tasks
from .transport.connection import ping
from .transport.preflight import check_redis
from .worker import Worker
from .worker.exitbound import ExitGuard

# Exit status of a worker stopped by a bug in one of its loops (EX_SOFTWARE).
CRASH_STATUS = 70

log = logging.getLogger("engine.cli")


# The settings' own defaults, which the flags' defaults are.
DEFAULTS = EngineSettings()


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    return build_parser().parse_args(argv)


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of `python -m engine` and its subcommands."""
    parser = argparse.ArgumentParser(prog="python -m engine")
    sub = parser.add_subparsers(dest="command", required=True)
    worker = sub.add_parser("worker", help="run a worker")
    worker.add_argument("--url", default=os.environ.get("REDIS_URL", DEFAULTS.redis_url))
    worker.add_argument("--prefix", default=DEFAULTS.prefix)
    worker.add_argument(
        "--tasks", required=True, help="comma-separated modules defining @task functions"
    )
    worker.add_argument(
        "--queues",
        default=None,
        help="comma-separated, in claim order; name:N limits that queue to N running jobs "
        "(default: default)",
    )
    worker.add_argument(
        "--role",
        default=None,
        help="take the queues from this role (engine.set_role) and follow its changes live",
    )
    worker.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override an EngineSettings field, e.g. --set lease_ms=5000 (repeatable)",
    )
    worker.add_argument("--concurrency", type=int, default=10)
    worker.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    worker.add_argument(
        "--max-jobs", type=int, default=None, help="retire after claiming this many jobs"
    )
    worker.add_argument(
        "--max-rss-mib", type=float, default=None, help="retire above this resident memory"
    )
    worker.add_argument(
        "--max-age-s", type=float, default=None, help="retire after running this long"
    )
    worker.add_argument("--log-level", default="INFO")
    formats = sub.add_parser(
        "hash-format",
        help="print the storage format of job hashes; --set moves it (engine/seam/hashformat.py)",
    )
    formats.add_argument("--url", default=os.environ.get("REDIS_URL", DEFAULTS.redis_url))
    formats.add_argument("--prefix", default=DEFAULTS.prefix)
    formats.add_argument("--set", type=int, default=None, metavar="FORMAT", dest="to")
    probe = sub.add_parser("probe", help="probe this host's workers (exit 0: passed)")
    add_probe_arguments(probe)
    probe.add_argument("--prefix", default=DEFAULTS.prefix)
    return parser


def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the probe's flags (shared with `manage.py jobsite probe`)."""
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument("--live", action="store_true", help="the worker process is not frozen")
    kind.add_argument("--ready", action="store_true", help="live, Redis answers, it claims")
    parser.add_argument("--status-dir", default="", help="where workers write their status")
    parser.add_argument("--pid", type=int, default=None, help="probe only this worker process")


def run_probe(settings: EngineSettings, ready: bool, pid: int | None) -> int:
    """Print the probe's one-line reason; return its exit status (0 passed, 1 failed)."""
    passed, reason = probe(status_dir(settings), ready, pid)
    print(reason)
    return 0 if passed else 1


def recycling(args: argparse.Namespace) -> dict[str, Any]:
    """Return the recycling settings the flags set (the others keep their values)."""
    names = ("max_jobs", "max_rss_mib", "max_age_s")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _flag(raw: str) -> bool:
    """Read true/false (also yes/no, on/off, 1/0, any case); ValueError for anything else."""
    word = raw.strip().lower()
    if word in ("true", "yes", "on", "1"):
        return True
    if word in ("false", "no", "off", "0"):
        return False
    raise ValueError(raw)


# How `--set` reads a value, by the field's annotation; an optional one also takes "none".
_SCALARS: dict[str, Any] = {"int": int, "float": float, "str": str, "bool": _flag}


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Turn FIELD=VALUE strings into typed EngineSettings overrides."""
    kinds = {f.name: str(f.type) for f in dataclasses.fields(EngineSettings) if f.init}
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or name not in kinds:
            raise SystemExit(
                f"--set {item!r}: expected FIELD=VALUE with FIELD one of {sorted(kinds)}"
            )
        kind = kinds[name].removesuffix(" | None")
        if kind != kinds[name] and raw.lower() == "none":
            out[name] = None
            continue
        if kind not in _SCALARS:
            raise SystemExit(f"--set {name}: not a number, a string or true/false; set it in code")
        try:
            out[name] = _SCALARS[kind](raw)
        except ValueError:
            raise SystemExit(f"--set {item!r}: not a valid {kind} for {name}") from None
    return out


def parse_queues(spec: str) -> tuple[list[str], dict[str, int]]:
    """Split 'a:5,b' into (['a', 'b'], {'a': 5})."""
    names: list[str] = []
    limits: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, limit = item.partition(":")
        names.append(name)
        if limit:
            limits[name] = int(limit)
    return names, limits


def load_tasks(modules: str) -> list[Task]:
    """Import each named module and return the tasks defined in it."""
    tasks: list[Task] = []
    for name in filter(None, (m.strip() for m in modules.split(","))):
        tasks.extend(collect_tasks(importlib.import_module(name)))
    return tasks


async def run_worker(args: argparse.Namespace) -> int:
    """Run one worker until a signal (or, in burst mode, until the queues are empty)."""
    overrides = {**parse_overrides(args.set), **recycling(args)}
    settings = EngineSettings.from_url(args.url, prefix=args.prefix, **overrides)
    if args.role is not None and args.queues is not None:
        log.error("give --queues or --role, not both")
        return 2
    queues, limits = parse_queues(args.queues or "default")
    try:
        worker = Worker(
            settings,
            load_tasks(args.tasks),
            queues=None if args.role is not None else queues,
            concurrency=args.concurrency,
            burst=args.burst,
            queue_concurrency=limits,
            role=args.role,
        )
    except ConfigError as exc:
        log.error("bad worker configuration: %s", exc)
        return 2
    loop = asyncio.get_running_loop()
    # The process's bound on its exit, whatever Redis does (engine/worker/exitbound.py).
    guard = ExitGuard(worker.settings.shutdown.exit_s, worker.holding, worker.exit_report)

    def on_signal(signum: int) -> None:
        guard.stop_signal(signum, worker.settings.shutdown.grace_s)
        worker.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await ping(worker.redis)
    except RedisUnavailable as exc:
        log.error("cannot reach redis url=%s error=%s", settings.redacted_url, exc)
        return 2
    await check_redis(worker.redis, settings.replica.acks)
    try:
        await worker.run()
    except ConfigError as exc:  # an unknown role
        log.error("worker not started: %s", exc)
        return 2
    except LoopCrashed:
        guard.exiting(CRASH_STATUS)  # a job's thread must not hold the exit either
        return CRASH_STATUS  # logged with its traceback where it happened
    guard.exiting(0)
    return 0


async def run_hash_format(args: argparse.Namespace) -> int:
    """Print the hash format of the Redis, after moving it to `--set`'s when given."""
    client = Client(EngineSettings.from_url(args.url, prefix=args.prefix))
    try:
        if args.to is not None:
            await move(client.redis, args.prefix, args.to, await client.workers.list())
        print(f"hash_format={await client.scripts.raw.hash_format()}")
    except (ConfigError, RedisUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        await client.aclose()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m engine`."""
    args = parse(argv)
    if args.command == "probe":
        settings = EngineSettings(prefix=args.prefix, status_dir=args.status_dir)
        return run_probe(settings, args.ready, args.pid)
    if args.command == "hash-format":
        return asyncio.run(run_hash_format(args))
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    sys.path.insert(0, os.getcwd())
    try:
        import uvloop
    except ImportError:
        return asyncio.run(run_worker(args))
    return uvloop.run(run_worker(args))
