"""Mirror drain cost: the time `apply_batch` takes per event, on a fresh database.

`python -m bench.mirror_drain DATABASE_URL [--jobs 20000] [--batch 5000]`: a private Redis, the
demo jobs enqueued and run by an in-process burst worker (every event kept), then the whole
stream read and applied in batches as the mirror does (job hashes included), timing only
`apply_batch`. A second pass replays the same events (all already applied). Before that,
`held_b_per_event`: what one prepared batch of `--batch` events holds (tracemalloc, read, job
hashes and `prepare` as the mirror does them, with the events and hashes let go). After them,
`write_peak_b_per_event`: what writing one such batch adds at its peak, on an emptied database.
Prints one JSON line.
Short and CPU-bound: for comparing two versions of the mirror side by side, not a report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import tracemalloc
from typing import Any


async def _held_bytes(client: Any, settings: Any, batch: int) -> float:
    """Return the bytes an event that one prepared batch holds once its events are let go."""
    from engine.resources.duties.feed import EventReader
    from jobsite.jobs.history.batches import prepare

    reader = EventReader(client.redis, settings, ["default"], group="held", consumer="held")
    await reader.ensure_groups()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    events = await reader.read(batch, None)
    ids = sorted({e.job for e in events})
    hashes: dict[str, dict[str, str]] = {}
    for start in range(0, len(ids), 1000):
        hashes.update(await reader.job_hashes("default", ids[start : start + 1000]))
    prepared = prepare(events, hashes)
    count = len(events)
    del events, hashes
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del prepared
    return held / count


def _write_peak_bytes(events: list[Any], hashes: dict[str, dict[str, str]]) -> float:
    """Return the bytes an event that writing one prepared batch adds at its peak (tracemalloc,
    over what the prepared batch holds), on an empty table."""
    from jobsite.jobs.history.batches import prepare, write_batch

    prepared = prepare(events, {e.job: hashes[e.job] for e in events if e.job in hashes})
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    write_batch(prepared)
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    return peak / len(events)


async def _events(
    redis_url: str, jobs: int, batch: int
) -> tuple[list[Any], dict[str, dict[str, str]], float]:
    from demo.demo_tasks import resize_image
    from engine import Client, EngineSettings, Worker
    from engine.resources.duties.feed import EventReader
    from jobsite.jobs.tasks.registry import load_tasks

    cap = max(100_000, jobs * 4)  # the whole backlog stays, read or not
    settings = EngineSettings.from_url(redis_url, events_maxlen=cap, events_kept_without_group=cap)
    async with Client(settings) as client:
        for first in range(0, jobs, 1000):
            calls = [resize_image.call(n, 1) for n in range(first, min(first + 1000, jobs))]
            await client.enqueue_many(calls)
        worker = Worker(settings, load_tasks(["demo.demo_tasks"]), concurrency=500, burst=True)
        await worker.run()
        held = await _held_bytes(client, settings, batch)
        reader = EventReader(client.redis, settings, ["default"], consumer="drain")
        await reader.ensure_groups()
        events: list[Any] = []
        while batch := await reader.read(10_000, None):
            events.extend(batch)
        ids = sorted({e.job for e in events})
        hashes: dict[str, dict[str, str]] = {}
        for start in range(0, len(ids), 1000):
            hashes.update(await reader.job_hashes("default", ids[start : start + 1000]))
    return events, hashes, held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("database_url")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=5000)
    args = parser.parse_args()
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from engine.dev.devserver import RedisServer
    from jobsite.jobs.history.batches import apply_batch

    call_command("migrate", verbosity=0)
    with RedisServer() as server:
        os.environ["REDIS_URL"] = server.url
        events, hashes, held = asyncio.run(_events(server.url, args.jobs, args.batch))
    out: dict[str, Any] = {
        "jobs": args.jobs,
        "events": len(events),
        "held_b_per_event": round(held),
    }
    for name in ("first", "replay"):
        cpu, wall = time.process_time(), time.perf_counter()
        for start in range(0, len(events), args.batch):
            chunk = events[start : start + args.batch]
            apply_batch(chunk, {e.job: hashes[e.job] for e in chunk if e.job in hashes})
        wall_s, cpu_s = time.perf_counter() - wall, time.process_time() - cpu
        out[name] = {
            "wall_s": round(wall_s, 2),
            "cpu_s": round(cpu_s, 2),
            "events_per_s": round(len(events) / wall_s),
        }
    call_command("flush", interactive=False, verbosity=0)
    out["write_peak_b_per_event"] = round(_write_peak_bytes(events[: args.batch], hashes))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
