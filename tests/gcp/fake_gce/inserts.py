"""Creating instances: ``insert`` and ``bulkInsert`` (all or nothing at ``minCount``: this fake
creates every requested instance or none), the capacity errors GCE reports in the operation,
and the reservations a SPECIFIC_RESERVATION affinity consumes."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from tests.gcp.fake_gce.common import BASE, ZONES, Obj, _error, already_exists, not_found
from tests.gcp.fake_gce.compute import Compute

CAPACITY_MESSAGES = {
    "ZONE_RESOURCE_POOL_EXHAUSTED": "The zone '{zone}' does not have enough resources available to fulfill the "
    "request.  Try a different zone, or try again later.",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": "The zone '{zone}' does not have enough resources available to "
    "fulfill the request. '(resource type:compute)'.",
    "QUOTA_EXCEEDED": "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.",
    "STOCKOUT": "The zone '{zone}' is out of stock for the requested machine type.",
}


class Inserts(Compute):
    """The two ways to create instances, and what may refuse them."""

    def __init__(self, **compute: Any) -> None:
        super().__init__(**compute)
        self.capacity_errors: dict[
            tuple[str, str, str], str
        ] = {}  # (zone, machine type, model) -> error code to answer

    def refuse(self, zone: str, machine_type: str, code: str, *, model: str = "STANDARD") -> None:
        self.capacity_errors[(zone, machine_type, model)] = code

    def _capacity_error(self, project: str, zone: str, machine_type: str, model: str, count: int) -> Obj | None:
        code = self.capacity_errors.get((zone, machine_type, model))
        if code is None:
            left = self.capacity.get((zone, machine_type, model))
            if left is None or left >= count:
                return None
            code = "ZONE_RESOURCE_POOL_EXHAUSTED"
        message = CAPACITY_MESSAGES.get(code, code).format(zone=f"projects/{project}/zones/{zone}")
        return {"errors": [{"code": code, "message": message}]}

    def _reserve(self, project: str, zone: str, body: Obj, count: int) -> tuple[str, str, str] | Obj | None:
        """The reservation a SPECIFIC_RESERVATION affinity consumes, or an operation error."""
        affinity = body.get("reservationAffinity") or {}
        if affinity.get("consumeReservationType") != "SPECIFIC_RESERVATION":
            return None
        value = str((affinity.get("values") or [""])[0])
        owner, name = (project, value)
        if value.startswith("projects/"):
            owner, name = value.split("/")[1], value.rsplit("/", 1)[-1]
        reservation = self.reservations.get((owner, zone, name))
        machine = str(body.get("machineType") or "").rsplit("/", 1)[-1]
        spec = (reservation or {}).get("specificReservation") or {}
        if reservation is None or (spec.get("instanceProperties") or {}).get("machineType") != machine:
            message = f"Reservation '{value}' not found or does not match."
            return {"errors": [{"code": "RESOURCE_NOT_FOUND", "message": message}]}
        if int(spec["count"]) - int(spec["inUseCount"]) < count:
            return {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": f"Reservation '{value}' is full."}]}
        return (owner, zone, name)

    def _create(self, project: str, zone: str, bodies: list[tuple[str, Obj]]) -> Obj | None:
        """Create the instances of one operation all together, or none of them (an error)."""
        first = bodies[0][1]
        machine = str(first["machineType"]).rsplit("/", 1)[-1]
        model = (first.get("scheduling") or {}).get("provisioningModel", "STANDARD")
        for name, _ in bodies:
            if (project, zone, name) in self.instances:
                message = f"The resource '{name}' already exists"
                return {"errors": [{"code": "RESOURCE_ALREADY_EXISTS", "message": message}]}
        reservation = self._reserve(project, zone, first, len(bodies))
        if isinstance(reservation, dict):
            return reservation
        if reservation is None:
            error = self._capacity_error(project, zone, machine, model, len(bodies))
            if error is not None:
                return error
        for name, body in bodies:
            instance = self._instance(project, zone, name, body)
            instance["status"] = "RUNNING"
            if reservation is not None:
                instance["_reservation"] = reservation
                spec = self.reservations[reservation]["specificReservation"]
                spec["inUseCount"] = str(int(spec["inUseCount"]) + 1)
            elif (zone, machine, model) in self.capacity:
                self.capacity[(zone, machine, model)] -= 1
            self.instances[(project, zone, name)] = instance
        return None

    async def insert(self, request: web.Request) -> web.Response:
        project, zone = request.match_info["project"], request.match_info["zone"]
        if zone not in ZONES:
            return not_found(f"projects/{project}/zones/{zone}")
        body = await request.json()
        name = str(body.get("name") or "")
        if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name):
            return _error(400, "invalid", f"Invalid value for field 'resource.name': '{name}'.")
        if (project, zone, name) in self.instances:
            return already_exists(f"projects/{project}/zones/{zone}/instances/{name}")
        problem = self._validate(project, zone, body)
        if problem:
            return _error(400, "invalid", problem)
        op = self._operation(project, zone, "insert", f"{BASE}projects/{project}/zones/{zone}/instances/{name}")
        self._finish_later(op, lambda: self._create(project, zone, [(name, body)]))
        return web.json_response(op)

    async def bulk_insert(self, request: web.Request) -> web.Response:
        project, zone = request.match_info["project"], request.match_info["zone"]
        body = await request.json()
        names = list((body.get("perInstanceProperties") or {}).keys())
        count = int(body.get("count") or 0)
        min_count = int(body.get("minCount") or count)
        props = dict(body.get("instanceProperties") or {})
        if not names or count != len(names) or not 1 <= min_count <= count:
            return _error(
                400,
                "invalid",
                "Invalid value for field 'bulkInsertInstanceResource': count, minCount and "
                "perInstanceProperties disagree.",
            )
        for name in names:
            if (project, zone, name) in self.instances:
                return already_exists(f"projects/{project}/zones/{zone}/instances/{name}")
        zonal = {**props, "machineType": f"zones/{zone}/machineTypes/{props.get('machineType')}"}
        if zonal.get("guestAccelerators"):
            zonal["guestAccelerators"] = [
                {**a, "acceleratorType": f"zones/{zone}/acceleratorTypes/{a['acceleratorType']}"}
                for a in zonal["guestAccelerators"]
            ]
        problem = self._validate(project, zone, zonal)
        if problem:
            return _error(400, "invalid", problem)
        op = self._operation(project, zone, "bulkInsert", f"{BASE}projects/{project}/zones/{zone}/instances")

        def apply() -> Obj | None:
            # all-or-nothing at minCount: this fake creates every requested instance or none
            return self._create(project, zone, [(n, zonal) for n in names])

        self._finish_later(op, apply)
        return web.json_response(op)
