"""The fake as one server: every part's state, the routes, the request log and throttling, and the
``/_fake/...`` controls for tests that run it as a separate process."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tests.gcp.fake_gce.billing import Billing
from tests.gcp.fake_gce.common import Obj, _error, not_found


class FakeGCE(Billing):
    """The fake's state and its aiohttp application (``app``)."""

    def __init__(self, *, operation_seconds: float = 0.05, page_size: int = 500, pull_wait_seconds: float = 1.0):
        super().__init__(operation_seconds=operation_seconds, page_size=page_size, pull_wait_seconds=pull_wait_seconds)
        self.throttle: list[tuple[int, str]] = []  # (HTTP status, reason) of the next requests to refuse
        self.requests: list[tuple[str, str]] = []  # (method, path) of every API request
        self.bodies: list[tuple[str, Obj]] = []  # (path, JSON body) of every POST
        self.app = self._app()

    # --- HTTP --------------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        c = "/compute/v1/projects/{project}"
        z = c + "/zones/{zone}"
        app.router.add_get(c + "/regions/{region}", self.get_region)
        app.router.add_get(c + "/regions/{region}/subnetworks/{name}", self.get_subnetwork)
        app.router.add_get(c + "/global/images/family/{family}", self.get_family)
        app.router.add_get(c + "/global/images/{name}", self.get_image)
        app.router.add_get(c + "/global/instanceTemplates/{name}", self.get_template)
        app.router.add_get(c + "/regions/{region}/instanceTemplates/{name}", self.get_regional_template)
        app.router.add_get(z + "/instanceGroupManagers/{name}", self.get_group_manager)
        app.router.add_get(
            "/v1/projects/{project}/locations/{location}/clusters/{cluster}/nodePools/{name}", self.get_node_pool
        )
        app.router.add_get(z + "/machineTypes", self.list_machine_types)
        app.router.add_get(z + "/acceleratorTypes", self.list_accelerator_types)
        app.router.add_get(z + "/reservations/{name}", self.get_reservation)
        app.router.add_post(z + "/instances", self.insert)
        app.router.add_post(z + "/instances/bulkInsert", self.bulk_insert)
        app.router.add_get(z + "/instances/{name}", self.get_instance)
        app.router.add_delete(z + "/instances/{name}", self.delete_instance)
        app.router.add_get(c + "/aggregated/instances", self.aggregated_instances)
        app.router.add_get(z + "/operations/{name}", self.get_operation)
        app.router.add_post(z + "/operations/{name}/wait", self.wait_operation)
        app.router.add_post("/v1/projects/{project}/subscriptions/{sub}", self.pubsub)
        app.router.add_get("/v1/services/{service}/skus", self.skus)
        app.router.add_post("/_fake/capacity", self.fake_capacity)
        app.router.add_post("/_fake/throttle", self.fake_throttle)
        app.router.add_post("/_fake/event", self.fake_event)
        app.router.add_get("/_fake/instances", self.fake_instances)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.path.startswith("/_fake/"):
            self.requests.append((request.method, request.path))
            if request.method == "POST" and request.can_read_body:
                try:
                    self.bodies.append((request.path, await request.json()))
                except ValueError:
                    return _error(400, "parseError", "This API does not support parsing form-encoded input.")
            if self.throttle:
                status, reason = self.throttle.pop(0)
                return _error(status, reason, "Rate Limit Exceeded")
        response: web.StreamResponse = await handler(request)
        return response

    # --- /_fake: controls for tests run against a separate process --------------------------------

    async def fake_capacity(self, request: web.Request) -> web.Response:
        body = await request.json()
        model = str(body.get("model") or "STANDARD")
        if body.get("code"):
            self.refuse(body["zone"], body["machineType"], body["code"], model=model)
        elif body.get("left") is None:
            self.capacity.pop((body["zone"], body["machineType"], model), None)
            self.capacity_errors.pop((body["zone"], body["machineType"], model), None)
        else:
            self.set_capacity(body["zone"], body["machineType"], int(body["left"]), model=model)
        return web.json_response({})

    async def fake_throttle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.throttle += [(int(body.get("status") or 429), str(body.get("reason") or "rateLimitExceeded"))] * int(
            body.get("count") or 1
        )
        return web.json_response({})

    async def fake_event(self, request: web.Request) -> web.Response:
        body = await request.json()
        try:
            if body["method"] == "compute.instances.preempted":
                self.preempt(body["zone"], body["name"])
            else:
                self.host_event(body["zone"], body["name"], body["method"])
        except KeyError:
            return not_found(str(body.get("name")))
        return web.json_response({})

    async def fake_instances(self, request: web.Request) -> web.Response:
        shown = [{k: v for k, v in i.items() if not k.startswith("_")} for i in self.instances.values()]
        return web.json_response(shown)
