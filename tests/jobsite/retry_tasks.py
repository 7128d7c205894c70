"""Tasks whose retries a first-time user gets wrong, and right."""

from __future__ import annotations

from engine import Retry, task


@task(name="first_hour.charge", max_retries=4)
def charge(order_id: int) -> None:
    raise ValueError(f"card declined for order {order_id}")


@task(name="first_hour.fetch", max_retries=4, expected_exceptions=(ConnectionError,))
def fetch(url: str) -> None:
    raise ConnectionError(url)


@task(name="first_hour.poll", max_retries=4)
def poll(ready: bool) -> None:
    if not ready:
        raise Retry(delay_s=0)
