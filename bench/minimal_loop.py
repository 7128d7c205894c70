"""The floor under Jobsite's worker: the least code that keeps the engine's core guarantees.

    python -m bench.minimal_loop --url URL [--burst]

A job is a HASH (task, JSON args, state, token) plus a member of a ready ZSET scored by priority
then arrival. A worker claims up to BATCH jobs in one Lua call (highest priority first, each
given a lease token and a deadline in a `started` ZSET), awaits each job's coroutine in turn,
then completes the batch in one Lua call that is fenced by each job's token and appends one event
per job to a stream. The next claim rides in the same pipeline as that completion. Nothing else:
no retries, no stall recovery, no scheduling, no metrics. `bin/bench` runs it as the system
"minimal", so the report shows Jobsite's figures as a share of this loop's, measured in one run.
"""

from __future__ import annotations

import argparse
import os
import uuid
from typing import Any

import orjson
import redis.asyncio as redis
import uvloop

from bench import probe

BATCH = 100
LEASE_MS = 30_000
READY, STARTED, EVENTS, WAKE = "min:ready", "min:started", "min:events", "min:wake"
JOB = "min:job:"

# KEYS: ready, wake, seq. ARGV: job key prefix, then per job: id, priority, args JSON.
SUBMIT = """
for i = 2, #ARGV, 3 do
  local seq = redis.call('INCR', KEYS[3])
  redis.call('HSET', ARGV[1] .. ARGV[i], 'task', 'noop', 'args', ARGV[i + 2], 'state', 'ready')
  redis.call('ZADD', KEYS[1], (100 - tonumber(ARGV[i + 1])) * 1e13 + seq, ARGV[i])
end
redis.call('LPUSH', KEYS[2], '1')
redis.call('LTRIM', KEYS[2], 0, 0)
return (#ARGV - 1) / 3
"""

# KEYS: ready, started. ARGV: job key prefix, most jobs, lease ms, token. Returns id, args pairs.
CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
local popped = redis.call('ZPOPMIN', KEYS[1], ARGV[2])
for i = 1, #popped, 2 do
  local id = popped[i]
  local key = ARGV[1] .. id
  redis.call('HSET', key, 'state', 'started', 'token', ARGV[4])
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', key, 'args')
end
return out
"""

# KEYS: started, events. ARGV: job key prefix, token, then ids. Returns how many it completed.
COMPLETE = """
local done = 0
for i = 3, #ARGV do
  local key = ARGV[1] .. ARGV[i]
  if redis.call('HGET', key, 'token') == ARGV[2] then
    redis.call('HSET', key, 'state', 'completed', 'result', 'null')
    redis.call('HDEL', key, 'token')
    redis.call('ZREM', KEYS[1], ARGV[i])
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', 100000, '*', 'job', ARGV[i], 'to', 'completed')
    done = done + 1
  end
end
return done
"""


async def noop(t_enqueued: float) -> None:
    probe.hit(t_enqueued)


class Loop:
    """Claim, run and complete batches until stopped (or, bursting, until the queue is empty)."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self.token = uuid.uuid4().hex
        self.claim_sha = self.complete_sha = ""

    def _claim_args(self) -> list[Any]:
        return [self.claim_sha, 2, READY, STARTED, JOB, BATCH, LEASE_MS, self.token]

    async def run(self, burst: bool) -> None:
        # Loaded once: a pipeline of Script objects would ask SCRIPT EXISTS on every execute.
        self.claim_sha = await self.redis.script_load(CLAIM)
        self.complete_sha = await self.redis.script_load(COMPLETE)
        claimed: list[bytes] = await self.redis.evalsha(*self._claim_args())
        while True:
            if not claimed:
                if burst:
                    return
                await self.redis.blpop([WAKE], timeout=1)
                claimed = await self.redis.evalsha(*self._claim_args())
                continue
            ids = claimed[::2]
            for raw in claimed[1::2]:
                await noop(*orjson.loads(raw))
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.evalsha(self.complete_sha, 2, STARTED, EVENTS, JOB, self.token, *ids)
                pipe.evalsha(*self._claim_args())
                _, claimed = await pipe.execute()


class Submitter:
    """Submit jobs of the no-op task: one script call per batch."""

    def __init__(self, client: redis.Redis) -> None:
        self.script = client.register_script(SUBMIT)

    async def submit(self, args: list[list[object]]) -> None:
        argv: list[object] = [JOB]
        for job_args in args:
            argv += (uuid.uuid4().hex, 0, orjson.dumps(job_args))
        await self.script(keys=[READY, WAKE, "min:seq"], args=argv)


async def _main(url: str, burst: bool) -> None:
    client = redis.Redis.from_url(url)
    try:
        await Loop(client).run(burst)
    finally:
        await client.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.minimal_loop")
    parser.add_argument("--url", default=os.environ.get("BENCH_REDIS_URL"))
    parser.add_argument("--burst", action="store_true")
    args = parser.parse_args(argv)
    uvloop.run(_main(args.url, args.burst))


if __name__ == "__main__":
    main()
