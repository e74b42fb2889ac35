"""The metrics and health endpoints: served on their ports, and a port that cannot be listened on
named in a clear error (the process then exits 1 with `operator.cannot_listen`)."""

from __future__ import annotations

import asyncio
import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from controller.operator.server import ListenError, Servers
from hack.ports import free_port


def _taken() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def _servers(metrics: int, health: int) -> Servers:
    return Servers(
        registry=CollectorRegistry(), readiness=list, bind_address="127.0.0.1", metrics_port=metrics, health_port=health
    )


async def test_a_port_in_use_is_named_and_nothing_is_left_listening() -> None:
    with _taken() as busy:
        port = busy.getsockname()[1]
        metrics = free_port()
        servers = _servers(metrics, port)
        with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1:{port} for the health endpoint"):
            await servers.start()
    # the metrics endpoint that did start is closed again: its port is free
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", metrics))


async def test_the_endpoints_answer_once_started() -> None:
    health = free_port()
    servers = _servers(free_port(), health)
    await servers.start()
    try:
        assert await _get(f"http://127.0.0.1:{health}/readyz") == "ok\n"
    finally:
        await servers.stop()


async def _get(url: str) -> str:
    def fetch() -> str:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())

    return await asyncio.to_thread(fetch)


async def test_metrics_port_zero_serves_no_metrics() -> None:
    health = free_port()
    servers = _servers(0, health)
    await servers.start()
    try:
        assert len(servers._runners) == 1  # the health endpoint alone
        assert await _get(f"http://127.0.0.1:{health}/healthz") == "ok\n"
    finally:
        await servers.stop()
