"""A fake Azure Resource Manager (Compute) and Retail Prices API: the documented REST subset joiner uses.

No emulator exists for Azure Compute, so the azure provider's tests talk to this server through the
real ``azure-mgmt-compute`` aio client (its ``base_url``). It shares no code with joiner and keeps
state the way ARM does:

* ``Microsoft.Compute/skus`` (Resource SKUs with capabilities, zones and restrictions, paged by
  ``nextLink``); ``virtualMachines`` PUT (create: ``201`` with ``provisioningState: Creating`` and an
  ``Azure-AsyncOperation`` URL; the operation ends ``Succeeded``, or ``Failed`` with ARM's error code,
  leaving the VM in state ``Failed`` as Azure does), GET, list, DELETE (``202``, ``Deleting``, then
  gone); capacity reservation groups' reservations with their ``instanceView.utilizationInfo``.
* errors in ARM's shape ``{"error": {"code", "message"}}``: 404 ``ResourceNotFound``, 429
  ``TooManyRequests`` with ``Retry-After``.
* ``/api/retail/prices``: the Retail Prices API's ``Items`` and ``NextPageLink``.
* capacity is counted per (zone, VM size, priority); chosen error codes can be forced.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

from aiohttp import web

Obj = dict[str, Any]
SUBSCRIPTION = "00000000-0000-0000-0000-0000000000aa"
RG = "mc_joiner_test"
LOCATION = "eastus"
API = "/subscriptions/{sub}"
VM_PATH = API + "/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines"
# size: (vCPUs, GiB, GPUs, family, zones, zones restricted for the subscription)
SIZES: dict[str, tuple[int, float, float, str, tuple[str, ...], tuple[str, ...]]] = {
    "Standard_D2s_v5": (2, 8, 0, "standardDSv5Family", ("1", "2", "3"), ()),
    "Standard_D4s_v5": (4, 16, 0, "standardDSv5Family", ("1", "2", "3"), ()),
    "Standard_NC4as_T4_v3": (4, 28, 1, "standardNCASv3_T4Family", ("1", "2", "3"), ()),
    "Standard_NC24ads_A100_v4": (24, 220, 1, "standardNCADSA100v4Family", ("1", "2", "3"), ("3",)),
    "Standard_ND96isr_H100_v5": (96, 1900, 8, "standardNDISRH100v5Family", ("1", "2"), ()),
    "Standard_NV6ads_A10_v5": (6, 55, 0.167, "StandardNVADSA10v5Family", ("1", "2", "3"), ()),
}
PRICES = {  # (pay-as-you-go, spot) USD per hour
    "Standard_D2s_v5": (0.096, 0.0192),
    "Standard_D4s_v5": (0.192, 0.0384),
    "Standard_NC4as_T4_v3": (0.526, 0.1578),
    "Standard_NC24ads_A100_v4": (3.673, 1.1019),
    "Standard_ND96isr_H100_v5": (98.32, 29.496),
}
NO_CAPACITY = "Allocation failed. We do not have sufficient capacity for the requested VM size in this"
CAPACITY_MESSAGES = {
    "AllocationFailed": f"{NO_CAPACITY} region.",
    "ZonalAllocationFailed": f"{NO_CAPACITY} zone.",
    "SkuNotAvailable": "The requested VM size is currently not available in location 'eastus' zones '{zone}'.",
    "OperationNotAllowed": "Operation could not be completed as it results in exceeding approved "
    "standardNCADSA100v4Family Cores quota.",
    "OverconstrainedAllocationRequest": "Allocation failed. VM(s) with the following constraints cannot be allocated.",
}
COMPUTE = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.Compute"
GROUP_ID = f"{COMPUTE}/capacityReservationGroups/crg"


def arm_error(status: int, code: str, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status, headers=headers)


class FakeARM:
    def __init__(self, *, operation_seconds: float = 0.02) -> None:
        self.operation_seconds = operation_seconds
        self.ids = itertools.count(1)
        self.vms: dict[tuple[str, str], Obj] = {}  # (rg lower, name) -> VM
        self.operations: dict[str, Obj] = {}
        self.capacity: dict[tuple[str, str, str], int] = {}  # (zone, size, Regular|Spot) -> left
        self.capacity_errors: dict[tuple[str, str, str], str] = {}
        self.throttle = 0  # the next N API requests answer 429
        self.requests: list[tuple[str, str]] = []
        self.bodies: list[tuple[str, Obj]] = []
        self.reservations: dict[str, Obj] = {}  # name -> capacity reservation (one group, "gpu-crg")
        self.prices_up = True
        self.queue: list[Obj] = []  # the Service Bus queue "interruptions": {"id", "body", "lock", "visibleAt"}
        self._tasks: set[asyncio.Task[None]] = set()
        self.app = self._app()

    # --- controls ----------------------------------------------------------------------------

    def refuse(self, zone: str, size: str, code: str, *, priority: str = "Regular") -> None:
        self.capacity_errors[(zone, size, priority)] = code

    def set_capacity(self, zone: str, size: str, left: int, *, priority: str = "Regular") -> None:
        self.capacity[(zone, size, priority)] = left

    def add_reservation(self, name: str, size: str, zone: str, capacity: int) -> None:
        rid = f"{GROUP_ID}/capacityReservations/{name}"
        self.reservations[name] = {
            "id": rid,
            "name": name,
            "location": LOCATION,
            "zones": [zone],
            "sku": {"name": size, "capacity": capacity},
            "properties": {
                "provisioningState": "Succeeded",
                "instanceView": {"utilizationInfo": {"virtualMachinesAllocated": []}},
            },
        }

    # --- the model ---------------------------------------------------------------------------

    def sku_rows(self) -> list[Obj]:
        rows: list[Obj] = [{"resourceType": "disks", "name": "Premium_LRS", "locations": [LOCATION]}]
        for name, (cpus, gib, gpus, family, zones, restricted) in SIZES.items():
            caps = [
                {"name": "vCPUs", "value": str(cpus)},
                {"name": "MemoryGB", "value": f"{gib:g}"},
                {"name": "CpuArchitectureType", "value": "x64"},
            ]
            if gpus:
                caps.append({"name": "GPUs", "value": f"{gpus:g}"})
            row: Obj = {
                "resourceType": "virtualMachines",
                "name": name,
                "tier": "Standard",
                "size": name.removeprefix("Standard_"),
                "family": family,
                "locations": [LOCATION],
                "locationInfo": [{"location": LOCATION, "zones": list(zones)}],
                "capabilities": caps,
                "restrictions": [],
            }
            if restricted:
                row["restrictions"].append(
                    {
                        "type": "Zone",
                        "values": [LOCATION],
                        "restrictionInfo": {"locations": [LOCATION], "zones": list(restricted)},
                        "reasonCode": "NotAvailableForSubscription",
                    }
                )
            rows.append(row)
        return rows

    def _allocate(self, vm: Obj) -> Obj | None:
        """The error of a VM that cannot be allocated, or None (capacity taken)."""
        props = vm["properties"]
        size = props["hardwareProfile"]["vmSize"]
        zone = (vm.get("zones") or ["1"])[0]
        priority = props.get("priority", "Regular")
        group = (props.get("capacityReservation") or {}).get("capacityReservationGroup")
        if group:
            for reservation in self.reservations.values():
                allocated = reservation["properties"]["instanceView"]["utilizationInfo"]["virtualMachinesAllocated"]
                fits = reservation["sku"]["name"] == size and reservation["zones"] == [zone]
                if fits and len(allocated) < reservation["sku"]["capacity"]:
                    allocated.append({"id": vm["id"]})
                    return None
            return {"code": "CapacityReservationNotAvailable", "message": "No capacity left in the reservation."}
        code = self.capacity_errors.get((zone, size, priority))
        left = self.capacity.get((zone, size, priority))
        if code is None and left is not None and left < 1:
            code = "ZonalAllocationFailed"
        if code is not None:
            return {"code": code, "message": CAPACITY_MESSAGES.get(code, code).format(zone=zone)}
        if left is not None:
            self.capacity[(zone, size, priority)] = left - 1
        return None

    def release(self, vm: Obj) -> None:
        props = vm["properties"]
        key = ((vm.get("zones") or ["1"])[0], props["hardwareProfile"]["vmSize"], props.get("priority", "Regular"))
        if key in self.capacity and props.get("provisioningState") != "Failed":
            self.capacity[key] += 1
        for reservation in self.reservations.values():
            info = reservation["properties"]["instanceView"]["utilizationInfo"]
            info["virtualMachinesAllocated"] = [a for a in info["virtualMachinesAllocated"] if a["id"] != vm["id"]]

    def annotate(self, name: str, annotation: str, *, context: str = "Platform Initiated") -> None:
        """A Resource Health annotation of a VM, as Event Grid delivers it to the Service Bus queue."""
        vm_id = f"{COMPUTE}/virtualMachines/{name}"
        event_id = f"{next(self.ids):08x}-1111-2222-3333-444444444444"
        event = {
            "id": event_id,
            "topic": f"/subscriptions/{SUBSCRIPTION}",
            "subject": vm_id,
            "data": {
                "resourceInfo": {
                    "id": f"{vm_id}/providers/Microsoft.ResourceHealth/resourceAnnotations/{event_id}",
                    "name": event_id,
                    "type": "Microsoft.ResourceHealth/resourceAnnotations",
                    "properties": {
                        "targetResourceId": vm_id,
                        "targetResourceType": "Microsoft.Compute/virtualMachines",
                        "occurredTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "annotationName": annotation,
                        "reason": annotation,
                        "summary": annotation,
                        "context": context,
                        "category": "Unplanned",
                    },
                },
                "operationalInfo": {"resourceEventTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                "apiVersion": "2022-08-01",
            },
            "eventType": "Microsoft.ResourceNotifications.HealthResources.ResourceAnnotated",
            "dataVersion": "1",
            "metadataVersion": "1",
            "eventTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self.queue.append({"id": event_id, "body": json.dumps(event), "lock": "", "visibleAt": 0.0})

    def evict(self, name: str) -> None:
        """A Spot eviction with policy Delete: the VM is gone, and Resource Health says it was preempted."""
        vm = self.vms.pop((RG.lower(), name))
        self.release(vm)
        self.annotate(name, "VirtualMachinePreempted")

    # --- HTTP --------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get(API + "/providers/Microsoft.Compute/skus", self.list_skus)
        app.router.add_get(VM_PATH, self.list_vms)
        app.router.add_put(VM_PATH + "/{name}", self.put_vm)
        app.router.add_get(VM_PATH + "/{name}", self.get_vm)
        app.router.add_delete(VM_PATH + "/{name}", self.delete_vm)
        app.router.add_get(API + "/providers/Microsoft.Compute/locations/{loc}/operations/{op}", self.get_operation)
        group = API + "/resourceGroups/{rg}/providers/Microsoft.Compute/capacityReservationGroups/{group}"
        app.router.add_get(group + "/capacityReservations", self.list_reservations)
        app.router.add_get(group + "/capacityReservations/{name}", self.get_reservation)
        app.router.add_get("/api/retail/prices", self.retail_prices)
        app.router.add_post("/servicebus/interruptions/messages/head", self.receive)
        app.router.add_delete("/servicebus/interruptions/messages/{id}/{lock}", self.complete)
        app.router.add_post("/_fake/evict/{name}", self.fake_evict)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        if request.path.startswith("/subscriptions/") and "operations" not in request.path:
            if self.throttle > 0:
                self.throttle -= 1
                return arm_error(429, "TooManyRequests", "The request is being throttled.", **{"Retry-After": "1"})
            if request.method == "PUT":
                self.bodies.append((request.path, await request.json()))
        response: web.StreamResponse = await handler(request)
        return response

    def _later(self, op: Obj, apply: Any) -> None:
        async def finish() -> None:
            await asyncio.sleep(self.operation_seconds)
            error = apply()
            op["status"] = "Failed" if error else "Succeeded"
            if error:
                op["error"] = error
            op["endTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

        task = asyncio.get_running_loop().create_task(finish())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _operation(self, request: web.Request) -> tuple[Obj, str]:
        name = f"{next(self.ids):08x}-0000-0000-0000-000000000000"
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        op: Obj = {"name": name, "status": "InProgress", "startTime": started}
        self.operations[name] = op
        url = (
            f"http://{request.host}/subscriptions/{request.match_info['sub']}/providers/Microsoft.Compute/"
            f"locations/{LOCATION}/operations/{name}?api-version=2024-07-01"
        )
        return op, url

    async def list_skus(self, request: web.Request) -> web.Response:
        rows = self.sku_rows()
        start = int(request.query.get("$skiptoken") or 0)
        page: Obj = {"value": rows[start : start + 3]}
        if start + 3 < len(rows):
            page["nextLink"] = str(request.url.update_query({"$skiptoken": str(start + 3)}))
        return web.json_response(page)

    def _public(self, vm: Obj) -> Obj:
        return {k: v for k, v in vm.items() if not k.startswith("_")}

    async def list_vms(self, request: web.Request) -> web.Response:
        rg = request.match_info["rg"].lower()
        return web.json_response({"value": [self._public(v) for (g, _), v in sorted(self.vms.items()) if g == rg]})

    async def get_vm(self, request: web.Request) -> web.Response:
        vm = self.vms.get((request.match_info["rg"].lower(), request.match_info["name"]))
        if vm is None:
            what = f"Microsoft.Compute/virtualMachines/{request.match_info['name']}"
            message = f"The Resource '{what}' under resource group '{request.match_info['rg']}' was not found."
            return arm_error(404, "ResourceNotFound", message)
        return web.json_response(self._public(vm))

    async def put_vm(self, request: web.Request) -> web.Response:
        rg, name = request.match_info["rg"], request.match_info["name"]
        body = await request.json()
        size = ((body.get("properties") or {}).get("hardwareProfile") or {}).get("vmSize")
        if size not in SIZES:
            return arm_error(400, "InvalidParameter", f"The value {size} provided for the VM size is not valid.")
        existing = self.vms.get((rg.lower(), name))
        if existing is not None and existing["properties"].get("provisioningState") != "Failed":
            return web.json_response(self._public(existing), status=200)  # an update of the same VM: nothing bought
        vm_id = (
            f"/subscriptions/{request.match_info['sub']}/resourceGroups/{rg}/providers/Microsoft.Compute/"
            f"virtualMachines/{name}"
        )
        vm: Obj = {
            "id": vm_id,
            "name": name,
            "type": "Microsoft.Compute/virtualMachines",
            "location": body.get("location"),
            "zones": body.get("zones") or [],
            "tags": body.get("tags") or {},
            "properties": {
                **(body.get("properties") or {}),
                "provisioningState": "Creating",
                "vmId": f"{next(self.ids):032x}",
            },
        }
        if body.get("identity"):
            vm["identity"] = body["identity"]
        self.vms[(rg.lower(), name)] = vm
        op, url = self._operation(request)

        def apply() -> Obj | None:
            error = self._allocate(vm)
            vm["properties"]["provisioningState"] = "Failed" if error else "Succeeded"
            return error

        self._later(op, apply)
        headers = {"Azure-AsyncOperation": url, "Retry-After": "0"}
        return web.json_response(self._public(vm), status=201, headers=headers)

    async def delete_vm(self, request: web.Request) -> web.Response:
        key = (request.match_info["rg"].lower(), request.match_info["name"])
        vm = self.vms.get(key)
        if vm is None:
            return web.Response(status=204)
        vm["properties"]["provisioningState"] = "Deleting"
        op, url = self._operation(request)

        def apply() -> None:
            gone = self.vms.pop(key, None)
            if gone is not None:
                self.release(gone)

        self._later(op, apply)
        return web.Response(status=202, headers={"Azure-AsyncOperation": url, "Location": url, "Retry-After": "0"})

    async def get_operation(self, request: web.Request) -> web.Response:
        op = self.operations.get(request.match_info["op"])
        if op is None:
            return arm_error(404, "ResourceNotFound", "operation not found")
        return web.json_response(op)

    async def list_reservations(self, request: web.Request) -> web.Response:
        rows = [{k: v for k, v in r.items() if k != "properties"} for r in self.reservations.values()]
        return web.json_response({"value": rows})

    async def get_reservation(self, request: web.Request) -> web.Response:
        found = self.reservations.get(request.match_info["name"])
        if found is None:
            return arm_error(404, "ResourceNotFound", "reservation not found")
        if request.query.get("$expand") != "instanceView":
            found = {**found, "properties": {"provisioningState": "Succeeded"}}
        return web.json_response(found)

    async def receive(self, request: web.Request) -> web.Response:
        """Service Bus peek-lock receive: the first visible message, locked for 30 s; 204 when none
        arrives within ``timeout`` seconds."""
        deadline = time.monotonic() + min(float(request.query.get("timeout") or 0), 2.0)
        while True:
            now = time.monotonic()
            ready = next((m for m in self.queue if m["visibleAt"] <= now), None)
            if ready is not None or now >= deadline:
                break
            await asyncio.sleep(0.02)
        if ready is None:
            return web.Response(status=204)
        ready["lock"] = f"{next(self.ids):08x}-lock"
        ready["visibleAt"] = now + 30.0
        enqueued = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
        props = {"MessageId": ready["id"], "LockToken": ready["lock"], "EnqueuedTimeUtc": enqueued, "DeliveryCount": 1}
        return web.Response(
            status=201,
            text=ready["body"],
            content_type="application/json",
            headers={"BrokerProperties": json.dumps(props)},
        )

    async def complete(self, request: web.Request) -> web.Response:
        m = request.match_info
        before = len(self.queue)
        self.queue = [q for q in self.queue if not (q["id"] == m["id"] and q["lock"] == m["lock"])]
        return web.Response(status=200 if len(self.queue) < before else 404)

    async def fake_evict(self, request: web.Request) -> web.Response:
        try:
            self.evict(request.match_info["name"])
        except KeyError:
            return arm_error(404, "ResourceNotFound", "no such VM")
        return web.json_response({})

    async def retail_prices(self, request: web.Request) -> web.Response:
        if not self.prices_up:
            return web.Response(status=503, text="Service Unavailable")
        items = []
        for name, (od, spot) in PRICES.items():
            short = name.removeprefix("Standard_").replace("_", " ")
            series = f"Virtual Machines {SIZES[name][3]} Series"
            common = {"armSkuName": name, "unitOfMeasure": "1 Hour", "type": "Consumption"}
            items.append({**common, "retailPrice": od, "skuName": short, "productName": series})
            items.append({**common, "retailPrice": spot, "skuName": f"{short} Spot", "productName": series})
            items.append({**common, "retailPrice": od * 1.8, "skuName": short, "productName": f"{series} Windows"})
        start = int(request.query.get("$skip") or 0)
        page: Obj = {"Items": items[start : start + 6], "NextPageLink": None}
        if start + 6 < len(items):
            page["NextPageLink"] = str(request.url.update_query({"$skip": str(start + 6)}))
        return web.json_response(page)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="the fake ARM server of tests/azure")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8091)
    parser.add_argument("--operation-seconds", type=float, default=1.0)
    args = parser.parse_args()
    web.run_app(FakeARM(operation_seconds=args.operation_seconds).app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
