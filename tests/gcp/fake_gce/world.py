"""The fake's world and the reads of it: the region and its zones, subnetworks, images (and their
families), instance templates, a GKE cluster's node pool and its instance group, machine and
accelerator types, reservations."""

from __future__ import annotations

import itertools
import json

from aiohttp import web

from tests.gcp.fake_gce.common import BASE, PROJECT, REGION, ZONES, Obj, _error, _now, not_found

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


class World:
    """The resources joiner reads but never writes, and the GETs that serve them."""

    def __init__(self, *, page_size: int = 500) -> None:
        self.page_size = page_size
        self.ids = itertools.count(1000)
        self.images: dict[str, Obj] = {}  # "project/name" -> image
        self.families: dict[str, str] = {}  # "project/family" -> "project/name"
        self.templates: dict[str, Obj] = {}  # "project/name" -> instance template
        self.subnetworks: dict[str, Obj] = {}  # "project/region/name" -> subnetwork
        self.reservations: dict[tuple[str, str, str], Obj] = {}  # (project, zone, name) -> reservation
        self.world()

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
