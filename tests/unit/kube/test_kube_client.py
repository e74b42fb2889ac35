"""The apiserver client's session: the environment's proxy is read once, not on every request."""

from __future__ import annotations

from pathlib import Path

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
        assert session.trust_env is False  # type: ignore[attr-defined]
        assert not session.closed  # type: ignore[attr-defined]
        assert not session.connector.closed  # type: ignore[attr-defined]
        assert configuration.proxy is None  # type: ignore[attr-defined]
    finally:
        await client.close()


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
