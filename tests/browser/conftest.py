"""Every test here drives Chromium: marked `browser`, so bin/test runs it in the browser pass
(a module that forgets its own mark is not run beside the unit tests, nor skipped)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.browser)
