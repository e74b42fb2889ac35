"""What Compute Engine is asked for one NodeClaim, and how its answer reads. Pure.

* :func:`instance_properties`: the instance resource of ``instances.insert`` (machine type, image,
  disks, subnetwork, labels, metadata, tags, service account, scheduling for spot or on-demand,
  attached GPUs, reservation affinity); :func:`template_form` makes the ``instanceProperties`` of a
  ``bulkInsert`` of it.
* :func:`gang_members`: a gang NodeClaim's attempt members and their planned offering.
* providerIDs (``gce://<project>/<zone>/<name>``, as the GCE cloud provider writes them), instance
  labels, the capacity codes that mark an offering unavailable, the states that count as alive.
"""

from __future__ import annotations

import re
from typing import Any, Final

from api.v1.gcenodeclass import LOCAL_SSD_GIB
from api.v1.labels import ANNOTATION_GANG_CLAIMS, CAPACITY_TYPE_SPOT, LABEL_NODEPOOL
from controller.cloudprovider.gcp.instancetypes import Reservation, Shape
from controller.cloudprovider.gcp.nodeclass import ImageChoice, ResolvedNodeClass, last_segment
from controller.cloudprovider.types import CreateError, OfferingId

Obj = dict[str, Any]

PROVIDER_ID_PREFIX: Final = "gce://"
LABEL_CLUSTER: Final = "joiner-cluster"
LABEL_NODECLAIM_UID: Final = "joiner-nodeclaim-uid"
LABEL_NODECLASS: Final = "joiner-nodeclass"
LABEL_GCE_NODEPOOL: Final = "joiner-nodepool"
LABEL_GANG_ATTEMPT: Final = "joiner-gang-attempt"
METADATA_IMAGE: Final = "joiner-image"
ANNOTATION_GANG_ATTEMPT: Final = "joiner.sh/gang-attempt"  # as controller.gang.markers writes it
CAPACITY_CODES: Final = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "QUOTA_EXCEEDED",
        "RESOURCE_POOL_EXHAUSTED",
        "STOCKOUT",
    }
)
LIVE_STATES: Final = ("PROVISIONING", "STAGING", "RUNNING", "STOPPING", "SUSPENDING", "SUSPENDED", "REPAIRING")
GCE_NAME: Final = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def provider_id_of(*, project: str, zone: str, name: str) -> str:
    return f"{PROVIDER_ID_PREFIX}{project}/{zone}/{name}"


def parse_provider_id(provider_id: str | None) -> tuple[str, str, str] | None:
    """(project, zone, name) of ``gce://<project>/<zone>/<name>``; None for any other providerID."""
    if not provider_id or not provider_id.startswith(PROVIDER_ID_PREFIX):
        return None
    parts = provider_id.removeprefix(PROVIDER_ID_PREFIX).split("/")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


def gang_members(nodeclaim: Obj) -> dict[str, OfferingId]:
    """The gang attempt's NodeClaims and their planned offerings, from ``joiner.sh/gang-claims``
    (``name=type/zone/capacity-type,...``); empty for a NodeClaim outside a gang."""
    raw = str(((nodeclaim.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_GANG_CLAIMS) or "")
    out: dict[str, OfferingId] = {}
    for item in filter(None, raw.split(",")):
        name, _, offering = item.partition("=")
        parts = offering.split("/")
        if len(parts) == 3:
            out[name.strip()] = OfferingId(instance_type=parts[0], zone=parts[1], capacity_type=parts[2])
    return out


def instance_properties(
    nodeclaim: Obj,
    nodeclass: ResolvedNodeClass,
    *,
    shape: Shape,
    zone: str,
    capacity_type: str,
    reservation: Reservation | None,
    cluster_label: str,
) -> Obj:
    """The instance resource ``instances.insert`` takes for one NodeClaim on one offering (zonal URLs;
    :func:`bulk_insert_body` makes the bulkInsert form of it)."""
    spec = nodeclass.spec
    project = spec.project
    choice: ImageChoice | None = nodeclass.image_for(gpu=shape.gpus > 0)
    if choice is None:
        raise CreateError(
            f"GCENodeClass {nodeclass.name!r} has no imageSelectorTerm for "
            f"{'GPU' if shape.gpus else 'CPU'} machines ({shape.name})",
            reason="NoImage",
        )
    template: Obj = dict(choice.template or {})
    meta = nodeclaim.get("metadata") or {}
    labels = {**(template.get("labels") or {}), **spec.labels}
    labels.update(
        {
            LABEL_CLUSTER: cluster_label,
            LABEL_NODECLASS: label_value(nodeclass.name),
            LABEL_GCE_NODEPOOL: label_value(str((meta.get("labels") or {}).get(LABEL_NODEPOOL) or "")),
        }
    )
    if meta.get("uid"):
        labels[LABEL_NODECLAIM_UID] = label_value(str(meta["uid"]))
    metadata_items: dict[str, str] = {
        str(i.get("key")): str(i.get("value") or "") for i in (template.get("metadata") or {}).get("items") or []
    }
    metadata_items.update(spec.metadata)
    if spec.startup_script:
        metadata_items["startup-script"] = spec.startup_script
    metadata_items[METADATA_IMAGE] = choice.image
    disks: list[Obj] = [
        {
            "boot": True,
            "autoDelete": True,
            "initializeParams": {
                "sourceImage": choice.image,
                "diskSizeGb": str(nodeclass.boot_disk_gib),
                "diskType": f"zones/{zone}/diskTypes/"
                + next((d.category for d in spec.disks if d.boot), "pd-balanced"),
            },
        }
    ]
    for d in spec.disks:
        if d.boot:
            continue
        for _ in range(d.count):
            if d.category == "local-ssd":
                disks.append(
                    {
                        "type": "SCRATCH",
                        "interface": "NVME",
                        "autoDelete": True,
                        "initializeParams": {
                            "diskType": f"zones/{zone}/diskTypes/local-ssd",
                            "diskSizeGb": str(LOCAL_SSD_GIB),
                        },
                    }
                )
            else:
                disks.append(
                    {
                        "autoDelete": True,
                        "initializeParams": {
                            "diskType": f"zones/{zone}/diskTypes/{d.category}",
                            "diskSizeGb": str(d.size_gib or 100),
                        },
                    }
                )
    scheduling: Obj = {"onHostMaintenance": "TERMINATE" if shape.gpus else "MIGRATE", "automaticRestart": False}
    if capacity_type == CAPACITY_TYPE_SPOT:
        scheduling.update({"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"})
    else:
        scheduling["provisioningModel"] = "STANDARD"
    body: Obj = {
        "machineType": f"zones/{zone}/machineTypes/{shape.machine_type}",
        "labels": labels,
        "metadata": {"items": [{"key": k, "value": v} for k, v in sorted(metadata_items.items())]},
        "disks": disks,
        "networkInterfaces": [{"subnetwork": nodeclass.subnetwork}],
        "scheduling": scheduling,
        "tags": {"items": sorted({*((template.get("tags") or {}).get("items") or []), *spec.network_tags})},
    }
    email = nodeclass.service_account(choice)
    if email:
        scopes = (
            spec.service_account.scopes
            if spec.service_account is not None
            else ((template.get("serviceAccounts") or [{}])[0].get("scopes") or [])
        )
        body["serviceAccounts"] = [{"email": email, "scopes": list(scopes)}]
    if shape.attached:
        body["guestAccelerators"] = [
            {
                "acceleratorType": f"zones/{zone}/acceleratorTypes/{shape.accelerator}",
                "acceleratorCount": shape.gpus,
            }
        ]
    if reservation is not None:
        body["reservationAffinity"] = {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [
                reservation.name
                if reservation.project == project
                else f"projects/{reservation.project}/reservations/{reservation.name}"
            ],
        }
    else:
        body["reservationAffinity"] = {"consumeReservationType": "NO_RESERVATION"}
    return body


def alive(raw: Obj) -> bool:
    return str(raw.get("status") or "") in LIVE_STATES


def label_value(value: str) -> str:
    """A GCE label value: lower-case letters, digits, '-' and '_', at most 63 characters."""
    return re.sub(r"[^-_a-z0-9]", "-", value.lower())[:63]


def template_form(properties: Obj) -> Obj:
    """bulkInsert's ``instanceProperties`` take bare names where ``instances.insert`` takes zonal
    URLs (machine type, disk types, accelerator types)."""
    out = dict(properties)
    out["machineType"] = last_segment(str(properties["machineType"]))
    disks = []
    for d in properties.get("disks") or []:
        disk = dict(d)
        params = dict(disk.get("initializeParams") or {})
        if "diskType" in params:
            params["diskType"] = last_segment(str(params["diskType"]))
        disk["initializeParams"] = params
        disks.append(disk)
    out["disks"] = disks
    if properties.get("guestAccelerators"):
        out["guestAccelerators"] = [
            {**a, "acceleratorType": last_segment(str(a["acceleratorType"]))} for a in properties["guestAccelerators"]
        ]
    return out


def bulk_insert_body(properties: Obj, names: list[str], *, attempt: str) -> Obj:
    """One ``bulkInsert`` for a gang: every member named after its NodeClaim, ``minCount`` = ``count``
    = the gang's size (all or nothing), the labels of the attempt instead of one NodeClaim's uid."""
    labels = dict(properties.get("labels") or {})
    labels.pop(LABEL_NODECLAIM_UID, None)  # one set of labels for every member
    if attempt:
        labels[LABEL_GANG_ATTEMPT] = label_value(attempt)
    shared = {k: v for k, v in properties.items() if k != "name"}
    shared["labels"] = labels
    return {
        "count": len(names),
        "minCount": len(names),
        "perInstanceProperties": {n: {} for n in names},
        "instanceProperties": template_form(shared),
    }
