"""Tasks the demo feeds to the worker."""

from __future__ import annotations

import asyncio
import random
import time

from engine import JobContext, Retry, task


class FlakyUpstream(Exception):
    """A transient error the demo retries."""


@task(name="demo.resize_image")
async def resize_image(image_id: int, width: int) -> dict[str, int]:
    await asyncio.sleep(random.uniform(0.001, 0.02))
    return {"image_id": image_id, "width": width}


@task(
    name="demo.send_email",
    max_retries=3,
    retry_delay_s=0.2,
    backoff="exponential",
    expected_exceptions=(FlakyUpstream,),
    takes_context=True,
)
async def send_email(job: JobContext, to: str) -> str:
    if job.attempt < 3:
        raise FlakyUpstream(f"SMTP busy (attempt {job.attempt})")
    return f"sent to {to}"


@task(name="demo.crunch_numbers")
def crunch_numbers(n: int) -> int:
    time.sleep(0.01)
    return sum(i * i for i in range(n))


@task(name="demo.charge_card", max_retries=0)
async def charge_card(amount_cents: int) -> None:
    raise ValueError(f"card declined for {amount_cents} cents")


@task(name="demo.poll_upstream", takes_context=True, max_retries=2)
async def poll_upstream(job: JobContext) -> str:
    if job.attempt == 1:
        raise Retry(delay_s=0.5, message="upstream not ready")
    return "ready"


@task(name="demo.import_rows", takes_context=True, timeout_s=120)
async def import_rows(job: JobContext, batches: int, pause_s: float = 0.5) -> int:
    """Import `batches` batches of 100 rows, logging, reporting progress and saving its place
    after each: a retry or a restart resumes after the last batch saved."""
    done = job.checkpointed["batch"] if job.checkpointed else 0
    for n in range(done + 1, batches + 1):
        await asyncio.sleep(pause_s)
        await job.log(f"imported batch {n} of {batches} (rows {(n - 1) * 100 + 1}-{n * 100})")
        await job.set_progress(100 * n / batches, f"{n * 100} of {batches * 100} rows")
        await job.checkpoint({"batch": n})
    return batches * 100


RATES_PER_EUR = {"EUR": 1.0, "USD": 1.08, "GBP": 0.86}


@task(name="demo.convert_price", max_retries=0)
async def convert_price(amount_cents: int, currency: str) -> int:
    """Convert euro cents; an unknown currency fails (replay it with a known one)."""
    if currency not in RATES_PER_EUR:
        raise LookupError(f"no rate for currency {currency!r}")
    return round(amount_cents * RATES_PER_EUR[currency])
