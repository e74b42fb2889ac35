"""The cache survives what a long-running controller meets: an expired watch (410 Gone) and an
apiserver that goes away. Both end in a relist that reconciles the store, deletions included."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from controller.clock import FakeClock
from controller.kube.client import GoneError, ListResult, WatchEvent
from controller.kube.resources import NODES, Resource
from controller.state.informer import Informer
from tests.unit import builders


def _node(name: str, rv: str) -> dict[str, Any]:
    return builders.node(name, metadata={"resourceVersion": rv})


@dataclass
class ScriptedSource:
    """Each list() returns the next snapshot; each watch() plays the next script, then fails as told."""

    lists: list[list[dict[str, Any]]]
    watches: list[tuple[list[WatchEvent], Exception | None]]
    list_calls: int = 0
    watched_from: list[str] = field(default_factory=list)
    timeouts: list[int] = field(default_factory=list)

    async def list(self, res: Resource) -> ListResult:
        items = self.lists[min(self.list_calls, len(self.lists) - 1)]
        self.list_calls += 1
        return ListResult(items=[dict(i) for i in items], resource_version=str(100 * self.list_calls))

    async def watch(
        self, res: Resource, *, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[WatchEvent]:
        self.watched_from.append(resource_version)
        self.timeouts.append(timeout_seconds)
        if not self.watches:
            await asyncio.Event().wait()  # a quiet, healthy watch
        events, error = self.watches.pop(0)
        for event in events:
            yield event
        if error is not None:
            raise error


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_an_expired_watch_relists_and_drops_what_was_deleted_meanwhile() -> None:
    seen: list[tuple[str, str]] = []
    source = ScriptedSource(
        lists=[[_node("a", "1"), _node("b", "2")], [_node("a", "1"), _node("c", "5")]],
        watches=[([WatchEvent("MODIFIED", _node("a", "3"))], GoneError(410, "Expired", "too old resource version"))],
    )
    informer = Informer(
        source=source,
        resource=NODES,
        clock=FakeClock(),
        handler=lambda e, o, _: seen.append((e, o["metadata"]["name"])),
    )
    task = asyncio.create_task(informer.run())
    await _settle()
    assert informer.synced.is_set()
    assert source.list_calls == 2, "410 Gone leads straight to a relist, without backoff"
    assert sorted(informer.store) == ["a", "c"]
    assert ("DELETED", "b") in seen  # b went away while we were not watching
    assert ("ADDED", "c") in seen
    assert source.watched_from[-1] == "200"  # and the new watch starts from the new list
    task.cancel()


async def test_an_apiserver_outage_is_retried_with_backoff_on_the_clock() -> None:
    clock = FakeClock()
    source = ScriptedSource(
        lists=[[_node("a", "1")], [_node("a", "7")]],
        watches=[([], ConnectionResetError("apiserver went away"))],
    )
    informer = Informer(source=source, resource=NODES, clock=clock, handler=lambda *_: None)
    task = asyncio.create_task(informer.run())
    await _settle()
    assert source.list_calls == 1  # waiting out the backoff, not hammering the apiserver
    await clock.advance(1.0)
    await _settle()
    assert source.list_calls == 2
    assert informer.store["a"]["metadata"]["resourceVersion"] == "7"
    task.cancel()


async def test_a_watch_that_ends_cleanly_resumes_from_the_last_version_with_the_timeout_asked_for() -> None:
    """The apiserver ends each watch after the timeout the informer asks for (``--watch-timeout``);
    a clean end resumes from the last resourceVersion seen, without a list."""
    source = ScriptedSource(
        lists=[[_node("a", "1")]],
        watches=[([WatchEvent("MODIFIED", _node("a", "7"))], None), ([], None)],
    )
    informer = Informer(
        source=source, resource=NODES, clock=FakeClock(), handler=lambda *_: None, watch_timeout_seconds=5
    )
    task = asyncio.create_task(informer.run())
    await _settle()
    assert source.list_calls == 1
    assert source.watched_from[:3] == ["100", "7", "7"]
    assert set(source.timeouts) == {5}
    task.cancel()
