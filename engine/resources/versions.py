"""Task versions a worker serves, advertised in Redis for rolling deploys.

Each worker names its build: the sorted task@versions it runs, hashed. It writes that SET per
queue it serves (claim-12.lua sets aside the jobs whose version is not in it, for a worker that
has it) and stamps each task@version in the queue's `served` HASH (the cleaner drops jobs set
aside only for a version unserved for `unserved_drop_after_s`, unserved-13.lua). Both are
written at start and then every ADVERTISE_S, never per job.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

from redis.asyncio import Redis

from ..keys import QueueKeys, version_tag
from ..settings import EngineSettings
from ..task import Registry

# How often a worker renews its build SETs and its served stamps (at most).
ADVERTISE_S = 5.0


def tags(registry: Registry) -> list[str]:
    """Return the task@versions of a registry, sorted."""
    return sorted(version_tag(t.name, t.version) for t in registry)


def build_digest(registry: Registry) -> str:
    """Return the name of a registry's build: the same tasks and versions, the same name."""
    return hashlib.sha1("\n".join(tags(registry)).encode()).hexdigest()[:16]


class Versions:
    """Advertise one worker's task versions in each queue it serves."""

    def __init__(self, settings: EngineSettings, registry: Registry, queues: Sequence[QueueKeys]):
        self.settings = settings
        self.tags = tags(registry)
        self.digest = build_digest(registry)
        self.queues = list(queues)
        # The build SET key per queue, which each claim names (claim-12.lua).
        self.build_keys = {keys: keys.build(self.digest) for keys in self.queues}
        # The build SET outlives a few missed renewals; gone, claims take every version again.
        self.ttl_ms = int(max(ADVERTISE_S * 6, settings.liveness_window_s * 4) * 1000)
        drop_after_s = settings.cleaner.unserved_drop_after_s
        self.interval_s = min(ADVERTISE_S, drop_after_s / 4 or ADVERTISE_S)
        self._next = 0.0

    def serve(self, queues: Sequence[QueueKeys]) -> None:
        """Advertise in `queues` from now on (a role changed; the next advertise must be forced).

        The build keys of the queues left stay known: a claim under way may still name them.
        """
        self.queues = list(queues)
        self.build_keys.update({keys: keys.build(self.digest) for keys in self.queues})

    async def advertise(self, redis: Redis, force: bool = False) -> None:
        """Write the build SETs and served stamps when due (or `force`)."""
        now = time.monotonic()
        if not force and now < self._next:
            return
        now_ms = int(time.time() * 1000)
        async with redis.pipeline(transaction=False) as pipe:
            for keys in self.queues:
                build = self.build_keys[keys]
                # "" names no task: the SET exists even for a worker without tasks.
                pipe.sadd(build, "", *self.tags)
                pipe.pexpire(build, self.ttl_ms)
                if self.tags:
                    pipe.hset(keys.served, mapping=dict.fromkeys(self.tags, now_ms))
            await pipe.execute()
        self._next = now + self.interval_s
