"""Workers: the live registry and the control orders (quiet, resume, stop)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from .. import serializer
from ..keys import control_key, stop_field, worker_key, workers_key
from ..ops import control
from ..ops.control import Order
from .base import Resource


class Workers(Resource):
    # `list` comes last: the methods above name the builtin list in their signatures.
    """The workers registered in the engine's Redis."""

    async def __call__(self) -> list[dict[str, Any]]:
        """Return the live workers (the old `Client.workers()`: `client.workers.list()` now)."""
        warnings.warn(
            "client.workers() is client.workers.list() now; the call goes in 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return await self.list()

    async def control(
        self,
        what: str,
        worker: str | None = None,
        host: str | None = None,
        queue: str | None = None,
    ) -> list[str]:
        """Tell one worker, every worker of a host or of a queue to quiet (stop claiming, finish
        what runs), resume or stop (gracefully); return the ids of the workers told.

        Claims stop on the server at once; the worker obeys within heartbeat_interval_s.
        """
        chosen = control.select(await self.list(), worker=worker, host=host, queue=queue)
        return await self.send(control.order(what), chosen)

    async def send(self, what: Order, workers: Sequence[Mapping[str, Any]]) -> list[str]:
        """Give `what` to each worker (registry entries, as `control.select` chose them);
        return their ids.

        An order is a key per worker (keys.control_key) that the worker reads with its registry
        renewal, every heartbeat_interval_s: no new round trip, obeyed within a second. Quiet
        and stop also fence the worker's claims on the server at once (its queues' meta
        `stop:<worker>` field, which claim-12.lua reads), so it claims nothing after the order
        is written, even a claim already queued behind its wait. A worker already on its way
        out (stopping, retiring) is not resumed: its own fence stays.
        """
        if what is Order.RESUME:
            workers = [w for w in workers if w.get("state") not in ("stopping", "retiring")]
        prefix = self.settings.prefix
        async with self.redis.pipeline(transaction=False) as pipe:
            for w in workers:
                worker_id = str(w["id"])
                queues = [q for q in str(w.get("queues", "")).split(",") if q]
                for queue in queues:
                    meta = self.keys(queue).meta
                    if what is Order.RESUME:
                        pipe.hdel(meta, stop_field(worker_id))
                    else:
                        pipe.hset(meta, stop_field(worker_id), what.value)
                key = control_key(prefix, worker_id)
                if what is Order.RESUME:
                    pipe.delete(key)
                else:
                    pipe.set(key, what.value, ex=7 * 86_400)
            await pipe.execute()
        return [str(w["id"]) for w in workers]

    async def list(self) -> list[dict[str, Any]]:
        """Return the live workers: id, host, pid, queues, concurrency, current jobs, heartbeat,
        state, role, resident memory (`rss_mib`), `outcomes` per queue ({"completed", "failed"})
        and task@`versions`."""
        prefix = self.settings.prefix
        ids: list[str] = await self.redis.zrange(workers_key(prefix), 0, -1)  # type: ignore[assignment]
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in ids:
                pipe.hgetall(worker_key(prefix, worker_id))
            rows = await pipe.execute()
        out = []
        for row in rows:
            if row:
                info: dict[str, Any] = dict(row)
                info["current_jobs"] = serializer.loads(row.get("current_jobs", "[]"))
                for name in ("pid", "concurrency", "started_at_ms", "heartbeat_at_ms"):
                    info[name] = int(row.get(name, 0))
                # Left out by workers older than these fields: none known.
                info["rss_mib"] = float(row.get("rss_mib") or 0)
                info["outcomes"] = serializer.loads(row.get("outcomes") or "{}")
                info["versions"] = serializer.loads(row.get("versions") or "[]")
                out.append(info)
        return out
