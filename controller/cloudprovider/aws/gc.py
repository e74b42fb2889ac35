"""Garbage collection of what joiner makes beside instances: launch templates, instance profiles and
per-gang placement groups.

A launch template is deleted when its EC2NodeClass is gone, or when it is stale: created more than
``stale_seconds`` ago and not used by this process for as long (a changed image, user data or pod
count made a new one; instances launched from it do not need it any more). An instance profile
joiner made (``joiner-<cluster>-<10 hex>``) is deleted when no EC2NodeClass with ``spec.role`` needs
it any more and no live instance of the cluster still runs with it (an instance's credentials come
from its profile): not named by a live instance, and no live instance of the NodeClass it was made
for (its ``joiner.sh/ec2nodeclass`` tag). A per-gang placement group (tagged ``joiner.sh/gang``) is
deleted when no live instance of the gang is left and no launch used it in the last ten minutes.
Only what is tagged or named for this cluster is ever touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import structlog

from controller.cloudprovider.aws.api import AWSApi, AWSError
from controller.cloudprovider.aws.fleet import TAG_CLUSTER, TAG_GANG, TAG_NODECLASS

log = structlog.get_logger()
Obj = dict[str, Any]
STALE_SECONDS: Final = 3600.0


@dataclass(frozen=True, slots=True)
class Collected:
    launch_templates: tuple[str, ...] = ()
    instance_profiles: tuple[str, ...] = ()
    placement_groups: tuple[str, ...] = ()


def profile_pattern(cluster: str) -> re.Pattern[str]:
    return re.compile(rf"^joiner-{re.escape(cluster)}-[0-9a-f]{{10}}$")


def stale_templates(
    templates: Iterable[Obj],
    *,
    nodeclasses: Iterable[str],
    used: Mapping[str, float],
    now: datetime,
    uptime_seconds: float,
    stale_seconds: float = STALE_SECONDS,
) -> list[str]:
    """The launch templates (DescribeLaunchTemplates rows of the cluster) no NodeClass needs. Pure.

    ``used``: template name -> seconds since this process last used it."""
    classes = set(nodeclasses)
    out = []
    for t in templates:
        name = str(t.get("LaunchTemplateName") or "")
        tags = {x.get("Key"): x.get("Value") for x in t.get("Tags") or []}
        created = t.get("CreateTime")
        age = (now - created).total_seconds() if isinstance(created, datetime) else 0.0
        idle = used.get(name, uptime_seconds)
        if tags.get(TAG_NODECLASS) not in classes or (age >= stale_seconds and idle >= stale_seconds):
            out.append(name)
    return sorted(out)


async def collect(
    api: AWSApi,
    *,
    cluster: str,
    nodeclasses: Mapping[str, Obj],
    needed_profiles: set[str],
    profiles_in_use: set[str],
    classes_in_use: set[str],
    gangs_in_use: AbstractSet[str] = frozenset(),
    groups_just_used: AbstractSet[str] = frozenset(),
    used_templates: Mapping[str, float],
    now: datetime,
    uptime_seconds: float,
) -> Collected:
    """Delete the cluster's launch templates and instance profiles nothing needs; what was deleted."""
    templates = await api.collect(
        "ec2",
        "describe_launch_templates",
        key="LaunchTemplates",
        Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]}],
    )
    deleted_templates = []
    for name in stale_templates(
        templates, nodeclasses=nodeclasses, used=used_templates, now=now, uptime_seconds=uptime_seconds
    ):
        try:
            await api.call("ec2", "delete_launch_template", LaunchTemplateName=name)
        except AWSError as err:
            if not err.code.startswith("InvalidLaunchTemplateName"):
                log.warning("aws.launch_template_not_deleted", name=name, code=err.code, error=err.message)
                continue
        deleted_templates.append(name)
        log.info("aws.launch_template_deleted", name=name, reason="no EC2NodeClass needs it")
    pattern = profile_pattern(cluster)
    profiles = await api.collect("iam", "list_instance_profiles", key="InstanceProfiles")
    deleted_profiles = []
    for profile in profiles:
        name = str(profile.get("InstanceProfileName") or "")
        if not pattern.match(name) or name in needed_profiles or name in profiles_in_use:
            continue
        try:
            got = await api.call("iam", "get_instance_profile", InstanceProfileName=name)
            tags = (got.get("InstanceProfile") or {}).get("Tags") or []
            owner = next((str(t.get("Value")) for t in tags if t.get("Key") == TAG_NODECLASS), None)
            # an instance of the profile's NodeClass may still run with it (DescribeInstances does not
            # always name the profile); a profile without the tag is kept while any instance of a
            # NodeClass that is gone still runs
            if (owner in classes_in_use) if owner else bool(classes_in_use - set(nodeclasses)):
                continue
            for role in profile.get("Roles") or []:
                await api.call(
                    "iam", "remove_role_from_instance_profile", InstanceProfileName=name, RoleName=role["RoleName"]
                )
            await api.call("iam", "delete_instance_profile", InstanceProfileName=name)
        except AWSError as err:
            if err.code != "NoSuchEntity":
                log.warning("aws.instance_profile_not_deleted", name=name, code=err.code, error=err.message)
                continue
        deleted_profiles.append(name)
        log.info("aws.instance_profile_deleted", name=name, reason="no EC2NodeClass or instance needs it")
    try:
        groups = await api.collect(
            "ec2",
            "describe_placement_groups",
            key="PlacementGroups",
            Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]}],
        )
    except AWSError as err:  # the rest was collected; the groups are tried at the next pass
        log.warning("aws.placement_groups_not_listed", code=err.code, error=err.message)
        groups = []
    deleted_groups = []
    for group in groups:
        name = str(group.get("GroupName") or "")
        gang = {t.get("Key"): t.get("Value") for t in group.get("Tags") or []}.get(TAG_GANG)
        if not gang or gang in gangs_in_use or name in groups_just_used:
            continue  # not a per-gang group of joiner's, or the gang still has instances
        try:
            await api.call("ec2", "delete_placement_group", GroupName=name)
        except AWSError as err:
            if not err.code.startswith("InvalidPlacementGroup.Unknown"):
                log.warning("aws.placement_group_not_deleted", name=name, code=err.code, error=err.message)
                continue
        deleted_groups.append(name)
        log.info("aws.placement_group_deleted", name=name, gang=gang, reason="no instance of the gang is left")
    return Collected(
        launch_templates=tuple(deleted_templates),
        instance_profiles=tuple(deleted_profiles),
        placement_groups=tuple(deleted_groups),
    )
