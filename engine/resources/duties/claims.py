"""Claims: the waits on the worker's queue markers, a claim riding behind one, and the sizes of
what waits in its queues."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from ...keys import QueueKeys
from ...seam.scripts import Scripts
from ...settings import EngineSettings
from ...transport.cluster import Fanout, per_slot
from ..base import Resource


class Claims(Resource):
    """What a worker's claimer sends besides its scripts: waits on markers (on a connection of
    their own, `blocking`) and the queue sizes a burst worker ends on."""

    def __init__(
        self, settings: EngineSettings, redis: Redis, scripts: Scripts, blocking: Redis
    ) -> None:
        super().__init__(settings, redis, scripts)
        self.blocking = blocking

    def waits(self, markers: Sequence[str]) -> Fanout | None:
        """Return one BZPOPMIN per slot group of `markers` when they span slots (None: one
        wait covers them all)."""
        return per_slot(self.blocking, markers, self.blocking.bzpopmin)

    async def wait(self, markers: Sequence[str], timeout_s: float) -> None:
        """Wait until one of `markers` is set, at most `timeout_s`."""
        await self.blocking.bzpopmin(markers, timeout=timeout_s)

    async def wait_then_claim(self, keys: QueueKeys, argv: list[Any], timeout_s: float) -> Any:
        """Wait on the marker of `keys` (at most `timeout_s`) and claim with `argv` the moment
        the wait ends, in one round trip; return the claim's reply (an error reply, NOSCRIPT
        too, is returned, not raised).

        The script set must know the hash format already (ScriptSet.hash_format).
        """
        claim = self.scripts.raw["claim"]
        async with self.blocking.pipeline(transaction=False) as pipe:
            pipe.bzpopmin(keys.marker, timeout=timeout_s)
            sent = claim.queue_in(pipe, keys, argv)  # with WAIT under replica_acks
            _, *replies = await pipe.execute(raise_on_error=False)
        return claim.read_queued(sent, replies)

    async def waiting(self, queues: Sequence[QueueKeys], scheduled: bool = True) -> int:
        """Return how many jobs wait in `queues`, ready or (`scheduled`) scheduled (one round
        trip)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for keys in queues:
                pipe.zcard(keys.submitted)
                if scheduled:
                    pipe.zcard(keys.scheduled)
            sizes: list[int] = await pipe.execute()
        return sum(sizes)
