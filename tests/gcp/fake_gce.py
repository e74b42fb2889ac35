"""A fake Google Compute Engine (and Pub/Sub) API server: the documented REST subset joiner uses.

No emulator exists for Compute Engine, so the gcp provider's tests and its end-to-end run talk to
this server instead. It shares no code with joiner (it imports nothing from ``controller`` or
``api``) and keeps state the way GCE does:

* ``/compute/v1/``: regions, subnetworks, images (and ``images/family/<f>``), instance templates,
  machineTypes, acceleratorTypes, reservations (``inUseCount`` counts the instances consuming them),
  instances (``insert``, ``bulkInsert``, ``get``, ``delete``, ``aggregated/instances`` with a
  ``labels.<k> = "<v>"`` or ``name = "<n>"`` filter and pagination) and zone operations (``get``,
  ``wait``): inserts and deletes are long-running, ``PENDING``/``RUNNING`` then ``DONE`` after
  ``operation_seconds``, with errors in ``error.errors[]`` as GCE reports them
  (``ZONE_RESOURCE_POOL_EXHAUSTED``, ``QUOTA_EXCEEDED``...).
* Errors on the HTTP level have Google's JSON error shape: ``{"error": {"code", "message",
  "errors": [{"reason", "domain", "message"}], "status"}}`` (404 ``notFound``, 409 ``alreadyExists``,
  403/429 ``rateLimitExceeded``).
* ``/v1/projects/<p>/subscriptions/<s>:pull`` and ``:acknowledge``: the audit-log entries of
  preemptions and host events, as a Log Router sink would publish them; unacknowledged messages come
  back after the ack deadline.
* ``/_fake/...`` (tests only): capacity per (zone, machine type, provisioning model), errors to
  inject, throttling, preemption and host events, image family updates, orphan instances, state.

Capacity is counted: an offering with ``capacity`` N accepts N more instances; a ``bulkInsert``
whose ``minCount`` does not fit creates nothing (GCE's all-or-nothing promise).

Run alone for the end-to-end test: ``python -m tests.gcp.fake_gce --port 8090``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Obj = dict[str, Any]
BASE = "https://www.googleapis.com/compute/v1/"
PROJECT = "joiner-test"
REGION = "us-central1"
ZONES = ("us-central1-a", "us-central1-b", "us-central1-c")
# name: (vCPUs, MiB, [(accelerator, count)], zones (None: all))
MACHINE_TYPES: dict[str, tuple[int, int, list[tuple[str, int]], tuple[str, ...] | None]] = {
    "e2-standard-2": (2, 8192, [], None),
    "e2-standard-4": (4, 16384, [], None),
    "e2-standard-8": (8, 32768, [], None),
    "n2-standard-8": (8, 32768, [], None),
    "n1-standard-8": (8, 30720, [], None),
    "n1-standard-16": (16, 61440, [], None),
    "g2-standard-8": (8, 32768, [("nvidia-l4", 1)], None),
    "g2-standard-24": (24, 98304, [("nvidia-l4", 2)], None),
    "a2-highgpu-1g": (12, 87040, [("nvidia-tesla-a100", 1)], None),
    "a2-highgpu-2g": (24, 174080, [("nvidia-tesla-a100", 2)], None),
    "a3-highgpu-8g": (208, 1916928, [("nvidia-h100-80gb", 8)], ("us-central1-a", "us-central1-c")),
}
# name: (description, maximumCardsPerInstance, zones)
ACCELERATOR_TYPES: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "nvidia-tesla-t4": ("NVIDIA T4", 4, ("us-central1-a", "us-central1-b")),
    "nvidia-l4": ("NVIDIA L4", 8, ZONES),
    "nvidia-tesla-a100": ("NVIDIA A100 40GB", 16, ZONES),
    "nvidia-h100-80gb": ("NVIDIA H100 80GB", 8, ("us-central1-a", "us-central1-c")),
}
# Cloud Billing Catalog rates of us-central1, USD per hour: (family, per vCPU, per GiB) on demand;
# spot is 30 % of it. GPUs per GPU.
CORE_RAM_RATES = {
    "E2": (0.021811, 0.002923),
    "N2": (0.031611, 0.004237),
    "N1": (0.031611, 0.004237),
    "G2": (0.02505, 0.002934),
    "A2": (0.031611, 0.004237),
    "A3": (0.0294, 0.0031),
}
GPU_RATES = {"Nvidia L4": 0.56, "Nvidia Tesla A100": 2.933908, "Nvidia H100 80GB": 9.7996, "Nvidia Tesla T4": 0.35}
CAPACITY_MESSAGES = {
    "ZONE_RESOURCE_POOL_EXHAUSTED": "The zone '{zone}' does not have enough resources available to fulfill the "
    "request.  Try a different zone, or try again later.",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": "The zone '{zone}' does not have enough resources available to "
    "fulfill the request. '(resource type:compute)'.",
    "QUOTA_EXCEEDED": "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.",
    "STOCKOUT": "The zone '{zone}' is out of stock for the requested machine type.",
}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000-00:00", time.gmtime())


def error_body(code: int, reason: str, message: str, status: str) -> Obj:
    return {
        "error": {
            "code": code,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
            "status": status,
        }
    }


def _error(code: int, reason: str, message: str) -> web.Response:
    status = {
        400: "INVALID_ARGUMENT",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        409: "ALREADY_EXISTS",
        429: "RESOURCE_EXHAUSTED",
        503: "UNAVAILABLE",
    }.get(code, "UNKNOWN")
    return web.json_response(error_body(code, reason, message, status), status=code)


def already_exists(path: str) -> web.Response:
    return _error(409, "alreadyExists", f"The resource '{path}' already exists")


def not_found(path: str) -> web.Response:
    return _error(404, "notFound", f"The resource '{path}' was not found")


@dataclass
class Subscription:
    messages: list[Obj] = field(default_factory=list)  # {"id", "data", "publishTime", "visibleAt", "ackId"}


class FakeGCE:
    """The fake's state and its aiohttp application (``app``)."""

    def __init__(self, *, operation_seconds: float = 0.05, page_size: int = 500, pull_wait_seconds: float = 1.0):
        self.operation_seconds = operation_seconds
        self.page_size = page_size
        self.pull_wait_seconds = pull_wait_seconds
        self.ack_deadline_seconds = 10.0
        self.ids = itertools.count(1000)
        self.instances: dict[tuple[str, str, str], Obj] = {}  # (project, zone, name) -> instance
        self.operations: dict[tuple[str, str, str], Obj] = {}
        self.capacity: dict[tuple[str, str, str], int] = {}  # (zone, machine type, STANDARD|SPOT) -> left
        self.capacity_errors: dict[tuple[str, str, str], str] = {}  # same key -> error code to answer
        self.throttle: list[tuple[int, str]] = []  # (HTTP status, reason) of the next requests to refuse
        self.requests: list[tuple[str, str]] = []  # (method, path) of every API request
        self.bodies: list[tuple[str, Obj]] = []  # (path, JSON body) of every POST
        self.images: dict[str, Obj] = {}  # "project/name" -> image
        self.families: dict[str, str] = {}  # "project/family" -> "project/name"
        self.templates: dict[str, Obj] = {}  # "project/name" -> instance template
        self.subnetworks: dict[str, Obj] = {}  # "project/region/name" -> subnetwork
        self.reservations: dict[tuple[str, str, str], Obj] = {}  # (project, zone, name) -> reservation
        self.billing_enabled = False  # a project's default: the Cloud Billing API is off
        self.subscriptions = {f"projects/{PROJECT}/subscriptions/interruptions": Subscription()}
        self.world()
        self.app = self._app()

    # --- the world -------------------------------------------------------------------------------

    def world(self) -> None:
        for name in ("cos-105-17412-1", "cos-109-17800-66"):
            self.add_image("cos-cloud", name, family="cos-stable")
        self.add_image(PROJECT, "gpu-node-v1", family="gpu-node")
        for name in ("nodes", "gpu-nodes"):
            self.subnetworks[f"{PROJECT}/{REGION}/{name}"] = {
                "kind": "compute#subnetwork",
                "name": name,
                "region": f"{BASE}projects/{PROJECT}/regions/{REGION}",
                "network": f"{BASE}projects/{PROJECT}/global/networks/default",
                "ipCidrRange": "10.128.0.0/20",
                "selfLink": f"{BASE}projects/{PROJECT}/regions/{REGION}/subnetworks/{name}",
            }
        self.templates[f"{PROJECT}/gke-gpu-pool"] = {
            "kind": "compute#instanceTemplate",
            "name": "gke-gpu-pool",
            "selfLink": f"{BASE}projects/{PROJECT}/global/instanceTemplates/gke-gpu-pool",
            "properties": {
                "machineType": "g2-standard-8",
                "metadata": {"items": [{"key": "kube-env", "value": "KUBERNETES_MASTER_NAME: 10.0.0.2\n"}]},
                "tags": {"items": ["gke-demo-node"]},
                "labels": {"goog-gke-node": ""},
                "serviceAccounts": [
                    {
                        "email": "gke-nodes@joiner-test.iam.gserviceaccount.com",
                        "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                    }
                ],
                "disks": [
                    {
                        "boot": True,
                        "initializeParams": {
                            "sourceImage": f"{BASE}projects/{PROJECT}/global/images/gpu-node-v1",
                            "diskSizeGb": "100",
                        },
                    }
                ],
            },
        }

        # a GKE cluster "ml" whose node pool "gpu-pool" has one instance group, using a regional template
        self.node_pools: dict[str, Obj] = {}  # "project/location/cluster/pool" -> node pool
        self.group_managers: dict[str, Obj] = {}  # "project/zone/name" -> instance group manager
        self.upgrade_node_pool("gpu-node-v1", version="v1")

    def upgrade_node_pool(self, image: str, *, version: str) -> str:
        """What a GKE upgrade of ml/gpu-pool does: a new (regional) template, the group pointed at it."""
        template = f"gke-ml-gpu-pool-{version}"
        properties = json.loads(json.dumps(self.templates[f"{PROJECT}/gke-gpu-pool"]["properties"]))
        properties["disks"][0]["initializeParams"]["sourceImage"] = f"{BASE}projects/{PROJECT}/global/images/{image}"
        link = f"{BASE}projects/{PROJECT}/regions/{REGION}/instanceTemplates/{template}"
        self.templates[f"{PROJECT}/{REGION}/{template}"] = {
            "name": template,
            "selfLink": link,
            "properties": properties,
        }
        group = "gke-ml-gpu-pool-grp"
        self.group_managers[f"{PROJECT}/us-central1-a/{group}"] = {
            "kind": "compute#instanceGroupManager",
            "name": group,
            "zone": f"{BASE}projects/{PROJECT}/zones/us-central1-a",
            "instanceTemplate": link,
            "instanceGroup": f"{BASE}projects/{PROJECT}/zones/us-central1-a/instanceGroups/{group}",
            "targetSize": 0,
        }
        self.node_pools[f"{PROJECT}/{REGION}/ml/gpu-pool"] = {
            "name": "gpu-pool",
            "config": {"machineType": "g2-standard-8"},
            "instanceGroupUrls": [f"{BASE}projects/{PROJECT}/zones/us-central1-a/instanceGroupManagers/{group}"],
            "status": "RUNNING",
            "version": "1.33.5-gke.1000000",
        }
        return f"projects/{PROJECT}/regions/{REGION}/instanceTemplates/{template}"

    def add_image(self, project: str, name: str, *, family: str | None = None) -> Obj:
        image = {
            "kind": "compute#image",
            "id": str(next(self.ids)),
            "name": name,
            "family": family,
            "status": "READY",
            "creationTimestamp": _now(),
            "selfLink": f"{BASE}projects/{project}/global/images/{name}",
        }
        self.images[f"{project}/{name}"] = image
        if family:
            self.families[f"{project}/{family}"] = f"{project}/{name}"
        return image

    def add_reservation(self, zone: str, name: str, machine_type: str, count: int, *, project: str = PROJECT) -> Obj:
        reservation = {
            "kind": "compute#reservation",
            "id": str(next(self.ids)),
            "name": name,
            "zone": f"{BASE}projects/{project}/zones/{zone}",
            "status": "READY",
            "specificReservationRequired": True,
            "specificReservation": {
                "count": str(count),
                "inUseCount": "0",
                "instanceProperties": {"machineType": machine_type},
            },
            "selfLink": f"{BASE}projects/{project}/zones/{zone}/reservations/{name}",
        }
        self.reservations[(project, zone, name)] = reservation
        return reservation

    def machine_type(self, zone: str, name: str) -> Obj | None:
        spec = MACHINE_TYPES.get(name)
        if spec is None or (spec[3] is not None and zone not in spec[3]) or zone not in ZONES:
            return None
        cpus, mib, accelerators, _ = spec
        row: Obj = {
            "kind": "compute#machineType",
            "id": str(sum(ord(ch) * 31**i for i, ch in enumerate(name)) % 10**9),
            "name": name,
            "description": f"{cpus} vCPUs, {mib / 1024:g} GB RAM",
            "guestCpus": cpus,
            "memoryMb": mib,
            "maximumPersistentDisks": 128,
            "zone": zone,
            "isSharedCpu": False,
            "architecture": "X86_64",
            "selfLink": f"{BASE}projects/{PROJECT}/zones/{zone}/machineTypes/{name}",
        }
        if accelerators:
            row["accelerators"] = [{"guestAcceleratorType": a, "guestAcceleratorCount": n} for a, n in accelerators]
        return row

    def machine_types_in(self, zone: str) -> list[Obj]:
        return [row for name in MACHINE_TYPES if (row := self.machine_type(zone, name)) is not None]

    # --- capacity and events (the tests' controls) -----------------------------------------------

    def set_capacity(self, zone: str, machine_type: str, left: int, *, model: str = "STANDARD") -> None:
        self.capacity[(zone, machine_type, model)] = left

    def refuse(self, zone: str, machine_type: str, code: str, *, model: str = "STANDARD") -> None:
        self.capacity_errors[(zone, machine_type, model)] = code

    def publish(self, project: str, zone: str, name: str, method: str, message: str) -> None:
        instance = self.instances.get((project, zone, name))
        entry = {
            "protoPayload": {
                "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
                "status": {"message": message},
                "authenticationInfo": {"principalEmail": "system@google.com"},
                "serviceName": "compute.googleapis.com",
                "methodName": method,
                "resourceName": f"projects/{project}/zones/{zone}/instances/{name}",
                "request": {"@type": "type.googleapis.com/compute.instances." + method.rsplit(".", 1)[-1]},
            },
            "insertId": f"{next(self.ids):x}",
            "resource": {
                "type": "gce_instance",
                "labels": {
                    "instance_id": (instance or {}).get("id", "0"),
                    "project_id": project,
                    "zone": zone,
                },
            },
            "timestamp": _now(),
            "severity": "INFO",
            "logName": f"projects/{project}/logs/cloudaudit.googleapis.com%2Fsystem_event",
            "operation": {"id": f"systemevent-{next(self.ids)}", "producer": method, "first": True, "last": True},
            "receiveTimestamp": _now(),
        }
        data = base64.b64encode(json.dumps(entry).encode()).decode()
        for sub_name, sub in self.subscriptions.items():
            if sub_name.startswith(f"projects/{project}/"):
                mid = str(next(self.ids))
                sub.messages.append(
                    {"id": mid, "data": data, "publishTime": _now(), "visibleAt": 0.0, "ackId": f"ack-{mid}-0"}
                )

    def preempt(self, zone: str, name: str, *, project: str = PROJECT) -> None:
        """A spot VM reclaimed: its termination action (DELETE) runs, the audit log says so."""
        instance = self.instances.get((project, zone, name))
        if instance is None:
            raise KeyError(name)
        self._release(instance)
        action = (instance.get("scheduling") or {}).get("instanceTerminationAction", "STOP")
        if action == "DELETE":
            del self.instances[(project, zone, name)]
        else:
            instance["status"] = "TERMINATED"
        self.publish(project, zone, name, "compute.instances.preempted", "Instance was preempted.")

    def host_event(self, zone: str, name: str, method: str, *, project: str = PROJECT) -> None:
        """``compute.instances.hostError`` or ``compute.instances.terminateOnHostMaintenance``: a GPU
        machine without automatic restart is left TERMINATED."""
        instance = self.instances.get((project, zone, name))
        if instance is None:
            raise KeyError(name)
        if method.endswith("terminateOnHostMaintenance") or not (instance.get("scheduling") or {}).get(
            "automaticRestart", True
        ):
            self._release(instance)
            instance["status"] = "TERMINATED"
        message = {
            "compute.instances.hostError": "Instance terminated by Compute Engine.",
            "compute.instances.terminateOnHostMaintenance": "Instance terminated during Compute Engine maintenance.",
        }.get(method, "Compute Engine event.")
        self.publish(project, zone, name, method, message)

    def running(self) -> list[Obj]:
        return [i for i in self.instances.values() if i["status"] == "RUNNING"]

    # --- instances ---------------------------------------------------------------------------------

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

    def _capacity_error(self, project: str, zone: str, machine_type: str, model: str, count: int) -> Obj | None:
        code = self.capacity_errors.get((zone, machine_type, model))
        if code is None:
            left = self.capacity.get((zone, machine_type, model))
            if left is None or left >= count:
                return None
            code = "ZONE_RESOURCE_POOL_EXHAUSTED"
        message = CAPACITY_MESSAGES.get(code, code).format(zone=f"projects/{project}/zones/{zone}")
        return {"errors": [{"code": code, "message": message}]}

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

    # --- HTTP --------------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        self._tasks: set[asyncio.Task[None]] = set()
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

    async def get_region(self, request: web.Request) -> web.Response:
        p, r = request.match_info["project"], request.match_info["region"]
        if r != REGION:
            return not_found(f"projects/{p}/regions/{r}")
        return web.json_response(
            {
                "kind": "compute#region",
                "name": r,
                "status": "UP",
                "zones": [f"{BASE}projects/{p}/zones/{zone}" for zone in ZONES],
                "selfLink": f"{BASE}projects/{p}/regions/{r}",
            }
        )

    async def get_subnetwork(self, request: web.Request) -> web.Response:
        m = request.match_info
        found = self.subnetworks.get(f"{m['project']}/{m['region']}/{m['name']}")
        return web.json_response(found) if found else not_found(request.path)

    async def get_family(self, request: web.Request) -> web.Response:
        m = request.match_info
        ref = self.families.get(f"{m['project']}/{m['family']}")
        return web.json_response(self.images[ref]) if ref else not_found(request.path)

    async def get_image(self, request: web.Request) -> web.Response:
        found = self.images.get(f"{request.match_info['project']}/{request.match_info['name']}")
        return web.json_response(found) if found else not_found(request.path)

    async def get_template(self, request: web.Request) -> web.Response:
        found = self.templates.get(f"{request.match_info['project']}/{request.match_info['name']}")
        return web.json_response(found) if found else not_found(request.path)

    async def get_regional_template(self, request: web.Request) -> web.Response:
        m = request.match_info
        found = self.templates.get(f"{m['project']}/{m['region']}/{m['name']}")
        return web.json_response(found) if found else not_found(request.path)

    async def get_group_manager(self, request: web.Request) -> web.Response:
        m = request.match_info
        found = self.group_managers.get(f"{m['project']}/{m['zone']}/{m['name']}")
        return web.json_response(found) if found else not_found(request.path)

    async def get_node_pool(self, request: web.Request) -> web.Response:
        m = request.match_info
        found = self.node_pools.get(f"{m['project']}/{m['location']}/{m['cluster']}/{m['name']}")
        if found is None:  # the GKE API's own error shape is Google's too
            return _error(404, "notFound", f'Not found: node pool "{m["name"]}" not found.')
        return web.json_response(found)

    def _page(self, request: web.Request, items: list[Obj], kind: str) -> web.Response:
        start = int(request.query.get("pageToken") or 0)
        size = min(int(request.query.get("maxResults") or 500), self.page_size)
        page: Obj = {"kind": kind, "items": items[start : start + size], "selfLink": str(request.url)}
        if start + size < len(items):
            page["nextPageToken"] = str(start + size)
        return web.json_response(page)

    async def list_machine_types(self, request: web.Request) -> web.Response:
        zone = request.match_info["zone"]
        return self._page(request, self.machine_types_in(zone), "compute#machineTypeList")

    async def list_accelerator_types(self, request: web.Request) -> web.Response:
        zone = request.match_info["zone"]
        rows = [
            {
                "kind": "compute#acceleratorType",
                "name": name,
                "description": desc,
                "maximumCardsPerInstance": most,
                "zone": f"{BASE}projects/{request.match_info['project']}/zones/{zone}",
            }
            for name, (desc, most, zones) in ACCELERATOR_TYPES.items()
            if zone in zones
        ]
        return self._page(request, rows, "compute#acceleratorTypeList")

    async def get_reservation(self, request: web.Request) -> web.Response:
        m = request.match_info
        found = self.reservations.get((m["project"], m["zone"], m["name"]))
        return web.json_response(found) if found else not_found(request.path)

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

    def sku_list(self) -> list[Obj]:
        """The catalog's SKUs as cloudbilling.googleapis.com lists them (a few it must ignore too)."""

        def sku(description: str, group: str, usage: str, price: float, regions: list[str], unit: str) -> Obj:
            units, nanos = int(price), round((price - int(price)) * 1e9)
            return {
                "name": f"services/6F81-5844-456A/skus/{next(self.ids):X}",
                "skuId": f"{next(self.ids):X}",
                "description": description,
                "category": {
                    "serviceDisplayName": "Compute Engine",
                    "resourceFamily": "Compute",
                    "resourceGroup": group,
                    "usageType": usage,
                },
                "serviceRegions": regions,
                "pricingInfo": [
                    {
                        "pricingExpression": {
                            "usageUnit": unit,
                            "tieredRates": [
                                {
                                    "startUsageAmount": 0,
                                    "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos},
                                }
                            ],
                        }
                    }
                ],
            }

        here = [REGION, "us-east1"]
        out: list[Obj] = []
        for family, (core, ram) in CORE_RAM_RATES.items():
            infix = "Predefined " if family == "N1" else ""
            for prefix, usage, factor in (("", "OnDemand", 1.0), ("Spot Preemptible ", "Preemptible", 0.3)):
                out.append(
                    sku(
                        f"{prefix}{family} {infix}Instance Core running in Americas",
                        "CPU",
                        usage,
                        core * factor,
                        here,
                        "h",
                    )
                )
                out.append(
                    sku(
                        f"{prefix}{family} {infix}Instance Ram running in Americas",
                        "RAM",
                        usage,
                        ram * factor,
                        here,
                        "GiBy.h",
                    )
                )
            out.append(
                sku(f"Commitment v1: {family} Cpu in Americas for 1 Year", "CPU", "Commit1Yr", core * 0.6, here, "h")
            )
        for name, price in GPU_RATES.items():
            out.append(sku(f"{name} GPU running in Americas", "GPU", "OnDemand", price, here, "h"))
            out.append(
                sku(
                    f"{name} GPU attached to Spot Preemptible VMs running in Americas",
                    "GPU",
                    "Preemptible",
                    price * 0.3,
                    here,
                    "h",
                )
            )
        out.append(sku("E2 Instance Core running in Belgium", "CPU", "OnDemand", 0.5, ["europe-west1"], "h"))
        return out

    async def skus(self, request: web.Request) -> web.Response:
        if not self.billing_enabled:
            message = (
                "Cloud Billing API has not been used in project joiner-test before or it is disabled. "
                "Enable it by visiting https://console.developers.google.com/apis/api/cloudbilling.googleapis.com"
            )
            return _error(403, "accessNotConfigured", message)
        rows = self.sku_list()
        start = int(request.query.get("pageToken") or 0)
        size = 10
        page: Obj = {"skus": rows[start : start + size], "nextPageToken": ""}
        if start + size < len(rows):
            page["nextPageToken"] = str(start + size)
        return web.json_response(page)

    async def pubsub(self, request: web.Request) -> web.Response:
        m = request.match_info
        name, _, verb = m["sub"].partition(":")
        sub = self.subscriptions.get(f"projects/{m['project']}/subscriptions/{name}")
        if sub is None:
            return _error(404, "notFound", f"Resource not found (resource={name}).")
        body = await request.json()
        if verb == "acknowledge":
            acks = set(body.get("ackIds") or [])
            sub.messages = [msg for msg in sub.messages if msg["ackId"] not in acks]
            return web.json_response({})
        if verb != "pull":
            return _error(400, "badRequest", f"unknown method {verb}")
        deadline = time.monotonic() + self.pull_wait_seconds
        while True:
            now = time.monotonic()
            ready = [msg for msg in sub.messages if msg["visibleAt"] <= now][: int(body.get("maxMessages") or 1)]
            if ready or now >= deadline:
                break
            await asyncio.sleep(0.02)
        out = []
        for msg in ready:
            attempt = int(msg["ackId"].rsplit("-", 1)[-1]) + 1
            msg["ackId"] = f"ack-{msg['id']}-{attempt}"
            msg["visibleAt"] = now + self.ack_deadline_seconds
            out.append(
                {
                    "ackId": msg["ackId"],
                    "message": {"data": msg["data"], "messageId": msg["id"], "publishTime": msg["publishTime"]},
                    "deliveryAttempt": attempt,
                }
            )
        return web.json_response({"receivedMessages": out} if out else {})

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--operation-seconds", type=float, default=1.0)
    args = parser.parse_args()
    fake = FakeGCE(operation_seconds=args.operation_seconds, pull_wait_seconds=5.0)
    web.run_app(fake.app, host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
