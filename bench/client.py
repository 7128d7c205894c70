"""Enqueue side of one system, run under that system's own interpreter by bench.run.

    python -m bench.client SYSTEM MODE N [--gap-ms MS]

MODE is `one` (N sequential enqueues; the first, which opens the connection, is not timed),
`bulk` (N jobs through the system's bulk path), `spaced` (N sequential enqueues stamped with
time.time(), MS apart, for latency), `settle` (the sender's settle(), if it has one) or
`versions`. Needs BENCH_REDIS_URL. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import platform
import sys
import time

from bench.peers import load


async def _run(system: str, mode: str, n: int, gap_s: float) -> dict[str, float]:
    sender = await load(system).open_sender(os.environ["BENCH_REDIS_URL"])
    try:
        if mode == "settle":
            settle = getattr(sender, "settle", None)
            if settle is not None:
                await settle()
            return {"n": 0, "elapsed_s": 0.0}
        if mode == "bulk":
            start = time.perf_counter()
            await sender.bulk(n)
            return {"n": n, "elapsed_s": time.perf_counter() - start}
        if mode == "one":
            await sender.one(0.0)
            start = time.perf_counter()
            for _ in range(n - 1):
                await sender.one(0.0)
            return {"n": n - 1, "elapsed_s": time.perf_counter() - start}
        start = time.perf_counter()
        for _ in range(n):
            await sender.one(time.time())
            await asyncio.sleep(gap_s)
        return {"n": n, "elapsed_s": time.perf_counter() - start}
    finally:
        await sender.close()


def _versions(system: str) -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in load(system).PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.client")
    parser.add_argument("system")
    parser.add_argument("mode", choices=("one", "bulk", "spaced", "settle", "versions"))
    parser.add_argument("n", type=int, nargs="?", default=0)
    parser.add_argument("--gap-ms", type=float, default=10.0)
    args = parser.parse_args(argv)
    if args.mode == "versions":
        result: dict[str, object] = dict(_versions(args.system))
    else:
        result = dict(asyncio.run(_run(args.system, args.mode, args.n, args.gap_ms / 1000)))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
