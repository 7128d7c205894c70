"""Health marks: what health checks keep between runs (`health_key`), such as the last state
recorded of each schedule or queue and a queue's DLQ size sample."""

from __future__ import annotations

from ...keys import health_key
from ..base import Resource


class HealthMarks(Resource):
    """One string per health mark, by kind ("schedule", "queue", "dlq") and name."""

    async def get(self, kind: str, name: str) -> str | None:
        """Return mark `kind`/`name`, or None."""
        got = await self.redis.get(health_key(self.settings.prefix, kind, name))
        return got if isinstance(got, str) else None

    async def put(self, kind: str, name: str, value: str) -> None:
        """Set mark `kind`/`name` to `value`."""
        await self.redis.set(health_key(self.settings.prefix, kind, name), value)

    async def swap(self, kind: str, name: str, value: str) -> str | None:
        """Set mark `kind`/`name` to `value`; return the one before, or None (SET ... GET)."""
        previous = await self.redis.set(
            health_key(self.settings.prefix, kind, name), value, get=True
        )
        return previous if isinstance(previous, str) else None
