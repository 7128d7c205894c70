"""Feed jobs at a steady rate: `python -m bench.feed REDIS_URL RATE SECONDS`; prints jobs sent."""

from __future__ import annotations

import asyncio
import sys
import time

from demo.demo_tasks import resize_image
from engine import Client, EngineSettings


async def feed(url: str, rate: int, seconds: float) -> int:
    """Enqueue `rate` jobs a second for `seconds`, in batches of rate/100 every 10 ms."""
    sent = 0
    batch = max(1, rate // 100)
    async with Client(EngineSettings.from_url(url)) as client:
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            await client.enqueue_many([resize_image.call(sent + i, 1) for i in range(batch)])
            sent += batch
            ahead = start + sent / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
    return sent


if __name__ == "__main__":
    print(asyncio.run(feed(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))))
