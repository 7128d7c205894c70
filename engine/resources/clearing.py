"""Clear a queue's finished jobs of one state from Redis, a batch (one script call) at a time.

Finished jobs have no index of their own (their hashes expire after the result ttl; those in
the dead-letter queue stay until pruned), so the queue's job hashes are walked with SCAN on the
master holding the queue's slot, and each batch of matching ids is deleted by purge-2.lua, which
checks every id's state again under its lock: a job retried meanwhile is left alone. Redis is
never blocked longer than one batch. The history keeps every row: clearing is not a transition.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..errors import Code, ConfigError
from ..fields import both, either
from ..job import TERMINAL_STATES, JobState
from ..ops.handle import Store
from ..ops.scanning import scan_job_ids

# Job hashes one SCAN step looks at, and so at most the ids of one purge-2.lua call.
BATCH = 500
CLEARABLE: tuple[str, ...] = tuple(s.value for s in JobState if s in TERMINAL_STATES)


def check_clearable(state: str) -> str:
    """Return `state` if its jobs may be cleared (a finished state), else raise ConfigError."""
    if state not in CLEARABLE:
        raise ConfigError(
            f"only finished jobs are cleared, state one of {', '.join(CLEARABLE)}; got {state!r}"
        )
    return state


async def count_state(client: Store, queue: str, state: str) -> int:
    """Return how many jobs of `queue` Redis holds in finished state `state`."""
    check_clearable(state)
    return sum([len(ids) async for ids in _matching(client, queue, state)])


async def clear_state(client: Store, queue: str, state: str) -> int:
    """Delete `queue`'s jobs in finished state `state` from Redis; return how many."""
    check_clearable(state)
    keys = client.keys(queue)
    cleared = 0
    async for ids in _matching(client, queue, state):
        codes = await client.scripts.purge(keys, state=state, job_ids=ids)
        cleared += sum(1 for code in codes if code == Code.OK)
    return cleared


async def _matching(client: Store, queue: str, state: str) -> AsyncIterator[list[str]]:
    """Yield, SCAN step by step, the ids of `queue`'s jobs whose state is `state`."""
    keys = client.keys(queue)
    cursor = 0
    while True:
        cursor, ids = await scan_job_ids(client.redis, keys, cursor, BATCH)
        if ids:
            async with client.redis.pipeline(transaction=False) as pipe:
                for job_id in ids:
                    pipe.hmget(keys.job(job_id), both("state"))
                states = [either(row)[0] for row in await pipe.execute()]
            chosen = [i for i, s in zip(ids, states, strict=True) if s == state]
            if chosen:
                yield chosen
        if cursor == 0:
            return
