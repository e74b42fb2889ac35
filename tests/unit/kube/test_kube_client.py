"""The apiserver client's sessions: the environment's proxy is read once, not on every request; the
requests in flight are bounded by joiner's workers, not by a connection pool shared with the watches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controller.kube.client import KubeClient

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://apiserver.example:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: secret}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
"""


async def _connect(tmp_path: Path) -> KubeClient:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return await KubeClient.connect(str(path))


def _session_and_configuration(client: KubeClient) -> tuple[object, object]:
    api = client._api
    return api.rest_client.pool_manager, api.configuration


async def test_requests_do_not_read_the_environment_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    client = await _connect(tmp_path)
    try:
        session, configuration = _session_and_configuration(client)
        watches = client._watch_api.rest_client.pool_manager
        assert watches is not session  # the watches have a pool of their own
        s: Any
        for s in (session, watches):
            assert s.trust_env is False
            assert not s.closed
            assert not s.connector.closed
        assert configuration.proxy is None  # type: ignore[attr-defined]
    finally:
        await client.close()
    assert session.closed  # type: ignore[attr-defined]
    assert watches.closed


async def test_the_proxy_for_the_apiserver_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://me:p%40ss@proxy.example:3128")
    client = await _connect(tmp_path)
    try:
        _, configuration = _session_and_configuration(client)
        assert configuration.proxy == "http://proxy.example:3128"  # type: ignore[attr-defined]
        # me:p@ss, base64
        assert configuration.proxy_headers == {"Proxy-Authorization": "Basic bWU6cEBzcw=="}  # type: ignore[attr-defined]
    finally:
        await client.close()
    monkeypatch.setenv("NO_PROXY", "apiserver.example")
    client = await _connect(tmp_path)
    try:
        _, configuration = _session_and_configuration(client)
        assert configuration.proxy is None  # type: ignore[attr-defined]
    finally:
        await client.close()


async def test_requests_name_joiner_in_their_user_agent(tmp_path: Path) -> None:
    """The apiserver's audit log, its request metrics and API Priority and Fairness see joiner by
    name and version, as client-go's controllers are seen, not as kubernetes_asyncio's default."""
    from aiohttp import web

    from controller.cli import _version
    from tests.unit.local_http import serving

    seen: list[str] = []

    async def version(request: web.Request) -> web.Response:
        seen.append(request.headers.get("User-Agent", ""))
        return web.json_response({"gitVersion": "v1.36.3"})

    async with serving("/version", version) as url:
        path = tmp_path / "kubeconfig"
        path.write_text(KUBECONFIG.replace("https://apiserver.example:6443", url))
        client = await KubeClient.connect(str(path))
        try:
            assert (await client.get_raw("/version"))["gitVersion"] == "v1.36.3"
        finally:
            await client.close()
    [agent] = seen
    assert agent.startswith(f"joiner/{_version()} (")
    assert "OpenAPI-Generator" not in agent


async def test_watches_take_no_request_connection_and_requests_are_not_queued_at_the_client(tmp_path: Path) -> None:
    """More informers' watches open than the old shared pool of 64 had connections, then 150 requests
    at once, as a burst's NodeClaim writer, lifecycle and nominator send them: the server answers none
    until all 150 are in, so the test passes only if the client lets them all through together. With
    one pool of 64 shared with the watches, no request got a connection at all."""
    import asyncio

    from aiohttp import web

    from controller.kube.resources import PODS
    from tests.unit.local_http import serving

    watches, requests = 70, 150
    end = asyncio.Event()
    inflight = 0
    all_in = asyncio.Event()
    watching = 0
    all_watching = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        nonlocal inflight, watching
        if request.query.get("watch") == "true":
            stream = web.StreamResponse()
            await stream.prepare(request)
            watching += 1
            if watching == watches:
                all_watching.set()
            await end.wait()  # a watch stays open: no event, no end
            return stream
        inflight += 1
        if inflight == requests:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), timeout=10)
        return web.json_response({"gitVersion": "v1.36.3"})

    async with serving("/{tail:.*}", answer) as url:
        path = tmp_path / "kubeconfig"
        path.write_text(KUBECONFIG.replace("https://apiserver.example:6443", url))
        client = await KubeClient.connect(str(path))

        async def watch() -> None:
            async for _ in client.watch(PODS, resource_version="1"):
                pass

        tasks = [asyncio.create_task(watch()) for _ in range(watches)]
        try:
            await asyncio.wait_for(all_watching.wait(), timeout=10)
            got = await asyncio.wait_for(
                asyncio.gather(*(client.get_raw("/version") for _ in range(requests))), timeout=15
            )
            assert len(got) == requests
            assert all(g["gitVersion"] == "v1.36.3" for g in got)
        finally:
            end.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.close()
