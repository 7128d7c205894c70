"""Write job outcomes to Redis in batches: completions in one script call per queue."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable
from typing import Any

from . import failpoints, serializer
from .errors import SCRIPT_ERRORS, LeaseLost
from .keys import QueueKeys
from .runner import Outcome
from .scripts import Scripts
from .settings import EngineSettings

log = logging.getLogger("engine.worker")


class OutcomeWriter:
    """Turn outcomes into fenced script calls; count what was refused."""

    def __init__(
        self, settings: EngineSettings, scripts: Scripts, worker_id: str, counters: dict[str, int]
    ) -> None:
        self.settings = settings
        self.scripts = scripts
        self.worker_id = worker_id
        self.counters = counters

    async def write(self, batch: list[Outcome]) -> None:
        """Write every outcome of `batch`; raises on a Redis error (the caller retries all)."""
        by_queue: dict[str, list[Outcome]] = defaultdict(list)
        for outcome in batch:
            by_queue[outcome.job.queue].append(outcome)
        calls: list[Awaitable[None]] = []
        for queue, outcomes in by_queue.items():
            keys = QueueKeys(self.settings.prefix, queue)
            done = [o for o in outcomes if o.kind == "complete"]
            if done:
                failpoints.hit("after_return")
                calls.append(self._complete(keys, done))
            calls.extend(self._one(keys, o) for o in outcomes if o.kind != "complete")
        await asyncio.gather(*calls)

    async def _complete(self, keys: QueueKeys, outcomes: list[Outcome]) -> None:
        argv: list[Any] = [
            keys.job_prefix,
            self.settings.events_maxlen,
            self.worker_id,
            len(outcomes),
        ]
        for o in outcomes:
            argv += (o.job.id, o.job.token or "", o.result, o.result_ttl_s * 1000)
        codes = await self.scripts.complete(keys, argv)
        for o, code in zip(outcomes, codes, strict=True):
            self.count(o, "completed", code)

    async def _one(self, keys: QueueKeys, o: Outcome) -> None:
        error = o.error or {}
        err = serializer.dumps(error)
        short = f"{error.get('type', '')}: {error.get('message', '')}"[:200]
        head = [
            keys.job_prefix,
            self.settings.events_maxlen,
            self.worker_id,
            o.job.id,
            o.job.token or "",
        ]
        ttl_ms = o.result_ttl_s * 1000
        if o.kind == "retry":
            failpoints.hit("before_retry")
            delay = "" if o.delay_s is None else int(o.delay_s * 1000)
            code = await self.scripts.retry(
                keys,
                [*head, delay, err, short, ttl_ms],
            )
            self.count(o, "cancelled" if code == 1 else "retried", 0 if code == 1 else code)
        elif o.kind == "release":
            code = await self.scripts.release(
                keys,
                [*head, short or "handed back"],
            )
            self.count(o, "released", code)
        else:
            failpoints.hit("before_dead")
            code = await self.scripts.fail(
                keys,
                [*head, o.kind, err, short, ttl_ms],
            )
            self.count(o, o.kind, code)

    def count(self, o: Outcome, name: str, code: int) -> None:
        """Count a written outcome, or a refused write (lease lost) with a log line."""
        if code >= 0:
            self.counters[name] += 1
        elif SCRIPT_ERRORS.get(code) is LeaseLost:
            self.counters["lease_lost"] += 1
            log.warning("lease lost job=%s worker=%s write=%s", o.job.id, self.worker_id, name)
        else:
            self.counters["write_refused"] += 1
            log.warning(
                "write refused job=%s worker=%s write=%s code=%d",
                o.job.id,
                self.worker_id,
                name,
                code,
            )
