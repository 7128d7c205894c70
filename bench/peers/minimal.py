"""The minimal loop (bench/minimal_loop.py): not a peer but the floor under Jobsite's worker.

Its row shows what the least code with the same core guarantees reaches on this machine, so the
ratios beside it are Jobsite's share of that floor.
"""

from __future__ import annotations

from pathlib import Path

from bench.peers import Sender, chunks

LABEL = "Minimal loop"
PACKAGES = ("redis", "hiredis", "orjson", "uvloop")
BATCH = 1000
BULK = f"one submit script call per {BATCH} jobs"
CONFIG = (
    "`python -m bench.minimal_loop`: claim 100 by priority with a lease (one Lua call), await "
    "each, complete them token-fenced with one event each (one Lua call, pipelined with the "
    "next claim)"
)
BURST = True


def worker_argv(bindir: Path, url: str, burst: bool, index: int) -> list[str]:
    argv = [str(bindir / "python"), "-m", "bench.minimal_loop", "--url", url]
    return [*argv, "--burst"] if burst else argv


class _Sender:
    def __init__(self, url: str) -> None:
        import redis.asyncio as redis

        from bench.minimal_loop import Submitter

        self.client = redis.Redis.from_url(url)
        self.submitter = Submitter(self.client)

    async def one(self, t_enqueued: float) -> None:
        await self.submitter.submit([[t_enqueued]])

    async def bulk(self, n: int) -> None:
        for size in chunks(n, BATCH):
            await self.submitter.submit([[0.0]] * size)

    async def close(self) -> None:
        await self.client.aclose()


async def open_sender(url: str) -> Sender:
    return _Sender(url)
