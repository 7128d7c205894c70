"""bind_or_raise: its positional shortcut accepts exactly what Signature.bind accepts."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from engine import bind_or_raise


def plain(a: Any, b: Any, c: Any = 1) -> None: ...
def star(a: Any, *rest: Any) -> None: ...
def kw_required(a: Any, *, b: Any) -> None: ...
def kw_default(a: Any, *, b: Any = 2) -> None: ...
def positional_only(a: Any, /, b: Any = 1, **more: Any) -> None: ...
def nothing() -> None: ...


@pytest.mark.parametrize("fn", [plain, star, kw_required, kw_default, positional_only, nothing])
@pytest.mark.parametrize("count", range(5))
@pytest.mark.parametrize("kwargs", [{}, {"b": 1}, {"a": 1}, {"z": 1}])
def test_agrees_with_signature_bind(fn: Any, count: int, kwargs: dict[str, Any]) -> None:
    args = tuple(range(count))
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        with pytest.raises(TypeError, match=str(exc)):
            bind_or_raise(fn, args, kwargs)
    else:
        bind_or_raise(fn, args, kwargs)
