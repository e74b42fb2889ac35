"""NodeClaims this process just created, until the cache shows them.

A decision made right after another must count the machines the first one bought, even before
their watch events arrive. Entries leave as soon as the cache has the NodeClaim (or its owner,
the NodeClaim writer, hears of it from the cache, or deletes it), or after a minute (a NodeClaim
deleted before the cache ever saw it must not be counted forever).
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.state.views import Obj

TTL_SECONDS = 60.0


class RecentClaims:
    def __init__(self) -> None:
        self._items: dict[str, tuple[float, Obj]] = {}

    def add(self, claim: Obj, *, now: float) -> None:
        self._items[claim["metadata"]["name"]] = (now, claim)

    def discard(self, name: str) -> None:
        self._items.pop(name, None)

    def get(self, name: str) -> Obj | None:
        item = self._items.get(name)
        return item[1] if item else None

    def pending(self, cached: Mapping[str, object], *, now: float) -> list[Obj]:
        """The NodeClaims the cache does not show yet (dropping those it shows and the stale ones)."""
        for name, (added, _) in list(self._items.items()):
            if name in cached or now - added > TTL_SECONDS:
                del self._items[name]
        return [claim for _, claim in self._items.values()]
