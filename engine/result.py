"""TaskResult: an explicit ok/err return value, so a task can fail without raising."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TaskResult:
    """Return `TaskResult.ok(value)` or `TaskResult.err(code, message)` from a task."""

    value: Any = None
    error_code: str | None = None
    message: str = ""

    @classmethod
    def ok(cls, value: Any = None) -> TaskResult:
        """Return a successful result carrying `value`."""
        return cls(value=value)

    @classmethod
    def err(cls, code: str, message: str = "") -> TaskResult:
        """Return a failure with an error code; the job ends `failed`."""
        return cls(error_code=code, message=message or code)

    @property
    def is_ok(self) -> bool:
        """Tell whether this is a success."""
        return self.error_code is None
