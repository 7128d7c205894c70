"""manage.py jobsite <subcommand>: operations on a running Jobsite: `probe`, `drain`."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from engine import add_probe_arguments, run_probe
from engine import drain as engine_drain
from jobsite.jobs import conf, services


class Command(BaseCommand):
    help = "Operate Jobsite: `probe --live` / `probe --ready` checks this host's workers."
    requires_system_checks: list[str] = []  # a probe must stay cheap: no checks, no database

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="subcommand", required=True)
        probe = sub.add_parser(
            "probe", help="exit 0 when this host's workers are live (--live) or ready (--ready)"
        )
        add_probe_arguments(probe)
        drain = sub.add_parser(
            "drain", help="cancel every job waiting in a queue (jobs enqueued meanwhile stay)"
        )
        drain.add_argument("queue")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["subcommand"] == "drain":
            self.drain(options["queue"])
            return
        settings = conf.engine_settings()
        if options["status_dir"]:
            settings = dataclasses.replace(settings, status_dir=options["status_dir"])
        status = run_probe(settings, options["ready"], options["pid"])
        if status:
            raise SystemExit(status)

    def drain(self, queue: str) -> None:
        """Drain `queue` here, in the foreground (the API runs it in the web process)."""
        conf.check_queue(queue)
        by = "manage.py jobsite drain"
        if services.run_engine(lambda c: engine_drain.begin(c, queue, by)) is None:
            raise CommandError(f"a drain of queue {queue!r} is already running")
        cancelled = services.run_engine(lambda c: engine_drain.run(c, queue))
        self.stdout.write(f"drained queue={queue} cancelled={cancelled}")
