"""Instances and their long-running operations: an instance's shape and the checks of an insert
(machine type, boot image, accelerators, subnetwork), get, delete, the aggregated list with its
filter and pages, zone operations (get, wait), and the capacity an instance holds until it goes."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

from aiohttp import web

from tests.gcp.fake_gce.common import BASE, ZONES, Obj, _error, _now, not_found
from tests.gcp.fake_gce.world import ACCELERATOR_TYPES, MACHINE_TYPES, World


class Compute(World):
    """Instances, operations and the capacity instances hold."""

    def __init__(self, *, operation_seconds: float = 0.05, **world: Any) -> None:
        super().__init__(**world)
        self.operation_seconds = operation_seconds
        self.instances: dict[tuple[str, str, str], Obj] = {}  # (project, zone, name) -> instance
        self.operations: dict[tuple[str, str, str], Obj] = {}
        self.capacity: dict[tuple[str, str, str], int] = {}  # (zone, machine type, STANDARD|SPOT) -> left
        self._tasks: set[asyncio.Task[None]] = set()

    def set_capacity(self, zone: str, machine_type: str, left: int, *, model: str = "STANDARD") -> None:
        self.capacity[(zone, machine_type, model)] = left

    def running(self) -> list[Obj]:
        return [i for i in self.instances.values() if i["status"] == "RUNNING"]

    def _key(self, instance: Obj) -> tuple[str, str, str]:
        model = (instance.get("scheduling") or {}).get("provisioningModel", "STANDARD")
        return (instance["zone"].rsplit("/", 1)[-1], instance["machineType"].rsplit("/", 1)[-1], model)

    def _release(self, instance: Obj) -> None:
        key = self._key(instance)
        if key in self.capacity:
            self.capacity[key] += 1
        reservation = instance.pop("_reservation", None)
        if reservation is not None and reservation in self.reservations:
            spec = self.reservations[reservation]["specificReservation"]
            spec["inUseCount"] = str(max(0, int(spec["inUseCount"]) - 1))

    def _validate(self, project: str, zone: str, body: Obj) -> str | None:
        machine = str(body.get("machineType") or "").rsplit("/", 1)[-1]
        if self.machine_type(zone, machine) is None:
            return (
                f"Invalid value for field 'resource.machineType': '{body.get('machineType')}'. "
                "Machine type does not exist in zone."
            )
        for disk in body.get("disks") or []:
            if disk.get("boot"):
                source = str((disk.get("initializeParams") or {}).get("sourceImage") or "")
                match = re.search(r"projects/([^/]+)/global/images/([^/]+)$", source)
                if match is None or f"{match[1]}/{match[2]}" not in self.images:
                    return f"Invalid value for field 'resource.disks[0].initializeParams.sourceImage': '{source}'."
        for acc in body.get("guestAccelerators") or []:
            name = str(acc.get("acceleratorType") or "").rsplit("/", 1)[-1]
            spec = ACCELERATOR_TYPES.get(name)
            if spec is None or zone not in spec[2]:
                return f"Invalid value for field 'resource.guestAccelerators[0].acceleratorType': '{name}'."
            if int(acc.get("acceleratorCount") or 0) > spec[1]:
                return "Invalid value for field 'resource.guestAccelerators[0].acceleratorCount'."
        if (body.get("guestAccelerators") or (MACHINE_TYPES.get(machine) or (0, 0, []))[2]) and (
            (body.get("scheduling") or {}).get("onHostMaintenance") != "TERMINATE"
        ):
            return "Instances with guest accelerators do not support live migration."
        subnet = str(((body.get("networkInterfaces") or [{}])[0]).get("subnetwork") or "")
        match = re.search(r"projects/([^/]+)/regions/([^/]+)/subnetworks/([^/]+)$", subnet)
        if match is None or f"{match[1]}/{match[2]}/{match[3]}" not in self.subnetworks:
            return f"Invalid value for field 'resource.networkInterfaces[0].subnetwork': '{subnet}'."
        return None

    def _instance(self, project: str, zone: str, name: str, body: Obj) -> Obj:
        machine = str(body["machineType"]).rsplit("/", 1)[-1]
        instance: Obj = {
            "kind": "compute#instance",
            "id": str(next(self.ids)),
            "creationTimestamp": _now(),
            "name": name,
            "zone": f"{BASE}projects/{project}/zones/{zone}",
            "machineType": f"{BASE}projects/{project}/zones/{zone}/machineTypes/{machine}",
            "status": "PROVISIONING",
            "labels": dict(body.get("labels") or {}),
            "tags": body.get("tags") or {},
            "metadata": body.get("metadata") or {},
            "serviceAccounts": body.get("serviceAccounts") or [],
            "scheduling": body.get("scheduling") or {},
            "networkInterfaces": [
                {
                    **n,
                    "subnetwork": BASE + n["subnetwork"][n["subnetwork"].find("projects/") :],
                    "networkIP": "10.0.0.9",
                }
                for n in body.get("networkInterfaces") or []
            ],
            "disks": [
                {"boot": bool(d.get("boot")), "type": d.get("type", "PERSISTENT"), "autoDelete": True, "index": i}
                for i, d in enumerate(body.get("disks") or [])
            ],
            "guestAccelerators": [
                {
                    "acceleratorType": f"{BASE}projects/{project}/zones/{zone}/acceleratorTypes/"
                    + str(a["acceleratorType"]).rsplit("/", 1)[-1],
                    "acceleratorCount": a["acceleratorCount"],
                }
                for a in body.get("guestAccelerators") or []
            ],
            "reservationAffinity": body.get("reservationAffinity") or {"consumeReservationType": "ANY_RESERVATION"},
            "selfLink": f"{BASE}projects/{project}/zones/{zone}/instances/{name}",
        }
        if not instance["guestAccelerators"]:
            del instance["guestAccelerators"]
        return instance

    def _operation(self, project: str, zone: str, kind: str, target: str) -> Obj:
        name = f"operation-{int(time.time() * 1000)}-{next(self.ids):x}"
        op = {
            "kind": "compute#operation",
            "id": str(next(self.ids)),
            "name": name,
            "zone": f"{BASE}projects/{project}/zones/{zone}",
            "operationType": kind,
            "targetLink": target,
            "status": "PENDING",
            "progress": 0,
            "insertTime": _now(),
            "user": "joiner@joiner-test.iam.gserviceaccount.com",
            "selfLink": f"{BASE}projects/{project}/zones/{zone}/operations/{name}",
        }
        self.operations[(project, zone, name)] = op
        return op

    def _finish_later(self, op: Obj, apply: Any) -> None:
        op["status"] = "RUNNING"
        op["startTime"] = _now()

        async def finish() -> None:
            await asyncio.sleep(self.operation_seconds)
            error = apply()
            if error:
                op["error"] = error
                unavailable = "RESOURCE_POOL" in json.dumps(error) or "STOCKOUT" in json.dumps(error)
                op["httpErrorStatusCode"] = 503 if unavailable else 403
                op["httpErrorMessage"] = "SERVICE UNAVAILABLE" if unavailable else "FORBIDDEN"
            op["status"] = "DONE"
            op["progress"] = 100
            op["endTime"] = _now()

        task = asyncio.get_running_loop().create_task(finish())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def get_instance(self, request: web.Request) -> web.Response:
        m = request.match_info
        found = self.instances.get((m["project"], m["zone"], m["name"]))
        if found is None:
            return not_found(f"projects/{m['project']}/zones/{m['zone']}/instances/{m['name']}")
        return web.json_response({k: v for k, v in found.items() if not k.startswith("_")})

    async def delete_instance(self, request: web.Request) -> web.Response:
        m = request.match_info
        key = (m["project"], m["zone"], m["name"])
        instance = self.instances.get(key)
        if instance is None:
            return not_found(f"projects/{m['project']}/zones/{m['zone']}/instances/{m['name']}")
        instance["status"] = "STOPPING"
        op = self._operation(m["project"], m["zone"], "delete", instance["selfLink"])

        def apply() -> None:
            gone = self.instances.pop(key, None)
            if gone is not None:
                self._release(gone)

        self._finish_later(op, apply)
        return web.json_response(op)

    async def aggregated_instances(self, request: web.Request) -> web.Response:
        project = request.match_info["project"]
        flt = request.query.get("filter", "").strip()
        label = re.fullmatch(r'labels\.([-_a-z0-9]+)\s*=\s*"([^"]*)"', flt)
        named = re.fullmatch(r'name\s*=\s*"([^"]*)"', flt)
        if flt and not (label or named):
            return _error(400, "invalid", f"Invalid value for field 'filter': '{flt}'. Invalid list filter expression.")
        found = [
            i
            for (p, _, _), i in sorted(self.instances.items())
            if p == project
            and (label is None or (i.get("labels") or {}).get(label[1]) == label[2])
            and (named is None or i["name"] == named[1])
        ]
        start = int(request.query.get("pageToken") or 0)
        size = self.page_size
        items: dict[str, Obj] = {f"zones/{zone}": {"warning": {"code": "NO_RESULTS_ON_PAGE"}} for zone in ZONES}
        for i in found[start : start + size]:
            scope = items[f"zones/{i['zone'].rsplit('/', 1)[-1]}"]
            scope.pop("warning", None)
            scope.setdefault("instances", []).append({k: v for k, v in i.items() if not k.startswith("_")})
        page: Obj = {"kind": "compute#instanceAggregatedList", "items": items}
        if start + size < len(found):
            page["nextPageToken"] = str(start + size)
        return web.json_response(page)

    async def get_operation(self, request: web.Request) -> web.Response:
        m = request.match_info
        op = self.operations.get((m["project"], m["zone"], m["name"]))
        return web.json_response(op) if op else not_found(request.path)

    async def wait_operation(self, request: web.Request) -> web.Response:
        """Returns when the operation is DONE or after (here) two seconds, whichever is first."""
        m = request.match_info
        op = self.operations.get((m["project"], m["zone"], m["name"]))
        if op is None:
            return not_found(request.path)
        deadline = time.monotonic() + 2.0
        while op["status"] != "DONE" and time.monotonic() < deadline:  # noqa: ASYNC110 (a poll, as GCE's)
            await asyncio.sleep(0.01)
        return web.json_response(op)
