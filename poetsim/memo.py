"""Values remembered per live object: computed once, forgotten when the object goes.

Graphs and schedules are immutable, so what is derived from one (its fingerprint, the
contract's facts, a schedule's arena layout) can be kept while it lives. :class:`PerObject`
keys by identity and holds only a weak reference, so it keeps nothing alive.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["PerObject"]

T = TypeVar("T")


class PerObject(Generic[T]):
    """``cache(obj, make)``: ``make(obj)`` the first time for a live ``obj``, then the same
    value; :meth:`known` says whether it is there without making it."""

    def __init__(self) -> None:
        self._items: dict[int, tuple[weakref.ref, T]] = {}

    def __contains__(self, key: int) -> bool:
        """Whether a value is held under the identity ``key`` (``id(obj)``); it is dropped
        when the object goes."""
        return key in self._items

    def known(self, obj: Any) -> bool:
        item = self._items.get(id(obj))
        return item is not None and item[0]() is obj

    def __call__(self, obj: Any, make: Callable[[Any], T]) -> T:
        key = id(obj)
        item = self._items.get(key)
        if item is not None and item[0]() is obj:
            return item[1]
        value = make(obj)
        items = self._items
        try:
            ref = weakref.ref(obj, lambda _r, key=key: items.pop(key, None))
        except TypeError:  # not weak-referenceable: do not remember it
            return value
        items[key] = (ref, value)
        return value
