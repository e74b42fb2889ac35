"""Why each NodePool refused the pods no NodePool could take, as of the provisioner's last batch:
the provisioner records it, the NodePool status shows it (condition ``PodsRefused``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from controller.scheduling.solver_explain import reasons_by_pool

Listener = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Refusal:
    """How many pending pods a pool refused, and the reason it gave the first of them."""

    pods: int
    reason: str


class RefusalBook:
    def __init__(self) -> None:
        self._by_pool: dict[str, Refusal] = {}
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        """``listener(pool)`` is called whenever what that pool refused changes."""
        self._listeners.append(listener)

    def record(self, *, pools: Iterable[str], unschedulable: Mapping[str, str]) -> None:
        """A batch's outcome: ``unschedulable`` (pod -> sentence) over the NodePools it planned with;
        a pool of ``pools`` that no sentence names refused nothing."""
        counts: dict[str, int] = {}
        first: dict[str, str] = {}
        for key in sorted(unschedulable):
            for pool, reason in reasons_by_pool(unschedulable[key]).items():
                counts[pool] = counts.get(pool, 0) + 1
                first.setdefault(pool, reason)
        new = {pool: Refusal(pods=n, reason=first[pool]) for pool, n in counts.items()}
        for pool in set(pools) | set(new):
            if self._by_pool.get(pool) == new.get(pool):
                continue
            if pool in new:
                self._by_pool[pool] = new[pool]
            else:
                del self._by_pool[pool]
            for listener in self._listeners:
                listener(pool)

    def of(self, pool: str) -> Refusal | None:
        return self._by_pool.get(pool)
