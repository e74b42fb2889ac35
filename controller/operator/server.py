"""The metrics endpoint (:8080/metrics) and the health endpoints (:8081/healthz, /readyz)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class ListenError(OSError):
    """An endpoint's address cannot be listened on (in use, or not this host's)."""


class Servers:
    def __init__(
        self,
        *,
        registry: CollectorRegistry,
        readiness: Callable[[], list[str]],
        bind_address: str,
        metrics_port: int,
        health_port: int,
    ) -> None:
        """`readiness()` returns the reasons the process is not ready (empty when ready)."""
        self._registry = registry
        self._readiness = readiness
        self._bind = bind_address
        self._ports = (metrics_port, health_port)
        self._runners: list[web.AppRunner] = []

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        problems = self._readiness()
        if problems:
            return web.Response(status=503, text="not ready: " + "; ".join(problems) + "\n")
        return web.Response(text="ok\n")

    async def start(self) -> None:
        metrics = web.Application()
        metrics.router.add_get("/metrics", self._metrics)
        health = web.Application()
        health.router.add_get("/healthz", self._healthz)
        health.router.add_get("/readyz", self._readyz)
        for what, app, port in (("metrics", metrics, self._ports[0]), ("health", health, self._ports[1])):
            if what == "metrics" and port == 0:
                continue  # --metrics-port 0: no metrics endpoint
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            self._runners.append(runner)
            try:
                await web.TCPSite(runner, self._bind, port).start()
            except OSError as err:
                await self.stop()
                raise ListenError(
                    err.errno, f"cannot listen on {self._bind}:{port} for the {what} endpoint: {err.strerror}"
                ) from err

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
