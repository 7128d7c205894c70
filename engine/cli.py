"""Command line: `python -m engine worker --queues a,b --concurrency N --burst`."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

from .connection import CONNECTION_ERRORS
from .settings import EngineSettings
from .task import Task, collect_tasks
from .worker import Worker

log = logging.getLogger("engine.cli")


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(prog="python -m engine")
    sub = parser.add_subparsers(dest="command", required=True)
    worker = sub.add_parser("worker", help="run a worker")
    worker.add_argument("--url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    worker.add_argument("--prefix", default="jobsite")
    worker.add_argument(
        "--tasks", required=True, help="comma-separated modules defining @task functions"
    )
    worker.add_argument("--queues", default="default", help="comma-separated, in claim order")
    worker.add_argument("--concurrency", type=int, default=10)
    worker.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    worker.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def load_tasks(modules: str) -> list[Task]:
    """Import each named module and return the tasks defined in it."""
    tasks: list[Task] = []
    for name in filter(None, (m.strip() for m in modules.split(","))):
        tasks.extend(collect_tasks(importlib.import_module(name)))
    return tasks


async def run_worker(args: argparse.Namespace) -> int:
    """Run one worker until a signal (or, in burst mode, until the queues are empty)."""
    settings = EngineSettings.from_url(args.url, prefix=args.prefix)
    tasks = load_tasks(args.tasks)
    worker = Worker(
        settings,
        tasks,
        queues=args.queues.split(","),
        concurrency=args.concurrency,
        burst=args.burst,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    try:
        await worker.redis.ping()
    except CONNECTION_ERRORS as exc:
        log.error("cannot reach redis url=%s error=%s", settings.redacted_url, exc)
        return 2
    await worker.run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m engine`."""
    args = parse(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    sys.path.insert(0, os.getcwd())
    try:
        import uvloop
    except ImportError:
        return asyncio.run(run_worker(args))
    return uvloop.run(run_worker(args))
