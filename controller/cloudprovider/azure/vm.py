"""The body of one Azure VM create (PUT virtualMachines): image, size, zone, spot or regular priority,
the capacity reservation group, the tags that tie the VM to its NodeClaim, the NIC and the custom
data. Pure: ``provider.py`` sends it.
"""

from __future__ import annotations

import base64
from typing import Any, Final

from api.v1.aksnodeclass import AKSNodeClassSpec
from api.v1.labels import (
    CAPACITY_TYPE_SPOT,
    LABEL_NODEPOOL,
)
from controller.cloudprovider.azure.instancetypes import (
    Reservation,
)
from controller.cloudprovider.kwok.offerings import Candidate

Obj = dict[str, Any]
TAG_CLUSTER: Final = "joiner-cluster"
TAG_NODECLAIM: Final = "joiner-nodeclaim"
TAG_NODECLAIM_UID: Final = "joiner-nodeclaim-uid"
TAG_NODEPOOL: Final = "joiner-nodepool"


def vm_body(
    nodeclaim: Obj, spec: AKSNodeClassSpec, c: Candidate, *, reservation: Reservation | None, cluster_name: str
) -> Obj:
    meta = nodeclaim["metadata"]
    gpu = "nvidia.com/gpu" in c.instance_type.capacity.to_quantities()
    image = spec.gpu_image_id if gpu and spec.gpu_image_id else spec.image_id
    image_ref = (
        {"communityGalleryImageId": image}
        if image.startswith("/CommunityGalleries/")
        else {"sharedGalleryImageId": image}
        if image.startswith("/SharedGalleries/")
        else {"id": image}
    )
    tags = {
        **spec.tags,
        TAG_CLUSTER: cluster_name,
        TAG_NODECLAIM: str(meta["name"]),
        TAG_NODEPOOL: str((meta.get("labels") or {}).get(LABEL_NODEPOOL) or ""),
    }
    if meta.get("uid"):
        tags[TAG_NODECLAIM_UID] = str(meta["uid"])
    properties: Obj = {
        "hardwareProfile": {"vmSize": c.instance_type.name},
        "storageProfile": {
            "imageReference": image_ref,
            "osDisk": {
                "createOption": "FromImage",
                "diskSizeGB": spec.os_disk_size_gb,
                "managedDisk": {"storageAccountType": spec.os_disk_type},
                "deleteOption": "Delete",
            },
        },
        "osProfile": {
            "computerName": str(meta["name"])[:63],
            "adminUsername": spec.admin_username,
            "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {
                    "publicKeys": [
                        {
                            "path": f"/home/{spec.admin_username}/.ssh/authorized_keys",
                            "keyData": spec.ssh_public_key,
                        }
                    ]
                },
            },
        },
        "networkProfile": {
            "networkApiVersion": "2022-11-01",
            "networkInterfaceConfigurations": [
                {
                    "name": f"{meta['name']}-nic",
                    "properties": {
                        "primary": True,
                        "deleteOption": "Delete",
                        "ipConfigurations": [
                            {"name": "ipconfig1", "properties": {"subnet": {"id": spec.vnet_subnet_id}}}
                        ],
                    },
                }
            ],
        },
        "priority": "Spot" if c.offering.capacity_type == CAPACITY_TYPE_SPOT else "Regular",
    }
    if spec.custom_data:
        properties["osProfile"]["customData"] = base64.b64encode(spec.custom_data.encode()).decode()
    if c.offering.capacity_type == CAPACITY_TYPE_SPOT:
        properties["evictionPolicy"] = "Delete"
        properties["billingProfile"] = {"maxPrice": spec.spot_max_price}
    if reservation is not None and spec.capacity_reservation_group_id:
        properties["capacityReservation"] = {"capacityReservationGroup": {"id": spec.capacity_reservation_group_id}}
    body: Obj = {
        "location": spec.location,
        "zones": [c.offering.zone.rsplit("-", 1)[-1]],
        "tags": tags,
        "properties": properties,
    }
    if spec.managed_identities:
        identities: Obj = {i: {} for i in spec.managed_identities}
        body["identity"] = {"type": "UserAssigned", "userAssignedIdentities": identities}
    return body


# --- delete / get / list -----------------------------------------------------------------
