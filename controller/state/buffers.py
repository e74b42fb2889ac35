"""The warm buffers, shared: the capacity controller publishes each NodePool's placeholders and how
much of its buffer is ready; the provisioner plans the placeholders and records why a buffer could
not be completed; disruption keeps the nodes that hold them; the NodePool status shows them.

It lives in the shared layer so those controllers stay independent of each other. In memory only:
everything in it is recomputed from the NodePools, the clock and the cache after a restart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from controller.scheduling.model import Pod

Listener = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class BufferReport:
    """One NodePool's buffer now. ``wanted``/``ready`` are in nodes or GPUs (see docs/capacity.md);
    ``missing`` counts placeholders with no room anywhere yet; ``problems`` are needs the pool cannot
    serve at all."""

    pool: str
    pods: tuple[Pod, ...] = ()
    wanted: int = 0
    ready: int = 0
    missing: int = 0
    problems: tuple[str, ...] = ()
    forecast: int | None = None  # what the forecast pre-warms (None: no forecast on the pool)
    forecast_confidence: float | None = None


class BufferBook:
    """The latest :class:`BufferReport` per NodePool and the latest reason a buffer stopped short."""

    def __init__(self) -> None:
        self._reports: dict[str, BufferReport] = {}
        self._limited: dict[str, str] = {}
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        """``listener(pool)`` is called whenever that pool's report or limit reason changes."""
        self._listeners.append(listener)

    def _changed(self, pool: str) -> None:
        for listener in self._listeners:
            listener(pool)

    def publish(self, report: BufferReport) -> None:
        """The pool's buffer now. A buffer with nothing wanted can be short of nothing: its limit
        reason goes too."""
        changed = self._reports.get(report.pool) != report
        if not report.pods and self._limited.pop(report.pool, None) is not None:
            changed = True
        if changed:
            self._reports[report.pool] = report
            self._changed(report.pool)

    def forget(self, pool: str) -> None:
        had = self._reports.pop(pool, None) is not None
        had = self._limited.pop(pool, None) is not None or had
        if had:
            self._changed(pool)

    def set_limited(self, pool: str, reason: str | None) -> None:
        """Why the pool's buffer could not be completed (None: it could)."""
        if self._limited.get(pool) == reason:
            return
        if reason is None:
            del self._limited[pool]
        else:
            self._limited[pool] = reason
        self._changed(pool)

    def report(self, pool: str) -> BufferReport | None:
        return self._reports.get(pool)

    def limited(self, pool: str) -> str | None:
        return self._limited.get(pool)

    def pools(self) -> list[str]:
        return sorted(self._reports)

    def pods(self) -> list[Pod]:
        """Every pool's placeholders."""
        return [pod for name in sorted(self._reports) for pod in self._reports[name].pods]
