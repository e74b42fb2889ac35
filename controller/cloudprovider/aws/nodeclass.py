"""Resolve an EC2NodeClass's selectors against EC2 (and IAM) into what its status lists.

:func:`resolve` asks AWS which subnets, security groups, images and capacity reservations the
selector terms match and which instance profile the nodes get, and says whether the class is
Ready, and why not (``SubnetsNotFound``, ``SecurityGroupsNotFound``, ``AMINotFound``,
``RoleNotFound``, ``InstanceProfileNotFound``, ``ResolutionFailed``). :func:`resolved_view` reads a
class back from the cluster (spec + status) for the provider, without calling AWS.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from api.v1.ec2nodeclass import (
    AMISelectorTerm,
    CapacityReservationSelectorTerm,
    EC2NodeClass,
    SecurityGroupSelectorTerm,
    SubnetSelectorTerm,
)
from controller.cloudprovider.aws.api import AWSApi, AWSError

Obj = dict[str, Any]
# images by name, for the aliases AWS publishes no parameters for
ALIAS_IMAGE_NAMES: Final = {"ubuntu": ("ubuntu-eks/k8s_*",)}
ALIAS_OWNERS: Final = {"ubuntu": "099720109477"}
# the public SSM parameters naming the EKS-optimized images per Kubernetes version, as EKS
# documents them (and Karpenter reads them): the latest, and a pinned release
AL2023_LATEST: Final = "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{variant}/recommended/image_id"
AL2023_PINNED: Final = (
    "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{variant}/"
    "amazon-eks-node-al2023-{arch}-{variant}-{k8s}-{release}/image_id"
)
BOTTLEROCKET: Final = "/aws/service/bottlerocket/aws-k8s-{k8s}{flavour}/{arch}/{release}/image_id"
SSM_ALIASES: Final = frozenset({"al2023", "bottlerocket"})
NO_VERSION: Final = (
    "the cluster's Kubernetes version is unknown, and an alias's image depends on it: give "
    "--cluster-version, or allow eks:DescribeCluster"
)


def alias_parameters(alias: str, kubernetes_version: str) -> list[str]:
    """The SSM parameters whose values are the images of ``alias`` (``al2023@latest``,
    ``al2023@v20250101``, ``bottlerocket@v1.26.0``) for a cluster of ``kubernetes_version``: one per
    architecture and accelerator variant (AL2023: standard, nvidia, neuron; Bottlerocket: the
    standard and the -nvidia flavour)."""
    family, _, release = alias.partition("@")
    release = release or "latest"
    out: list[str] = []
    for arch in ("x86_64", "arm64"):
        if family == "al2023":
            for variant in ("standard", "nvidia", "neuron"):
                if variant == "neuron" and arch != "x86_64":
                    continue
                template = AL2023_LATEST if release == "latest" else AL2023_PINNED
                out.append(template.format(k8s=kubernetes_version, arch=arch, variant=variant, release=release))
        elif family == "bottlerocket":
            for flavour in ("", "-nvidia"):
                version = "latest" if release == "latest" else release.lstrip("v")
                out.append(BOTTLEROCKET.format(k8s=kubernetes_version, flavour=flavour, arch=arch, release=version))
    return out


async def alias_image_ids(api: AWSApi, alias: str, kubernetes_version: str) -> list[str]:
    """The image ids the alias's SSM parameters name (parameters that do not exist are skipped:
    not every variant is built for every architecture and version)."""
    names = alias_parameters(alias, kubernetes_version)
    ids: list[str] = []
    for i in range(0, len(names), 10):  # GetParameters takes at most 10 names
        answer = await api.call("ssm", "get_parameters", Names=names[i : i + 10])
        found = {str(p.get("Name")): str(p.get("Value")) for p in answer.get("Parameters") or []}
        ids += [found[n] for n in names[i : i + 10] if found.get(n, "").startswith("ami-")]
    return ids


@dataclass(frozen=True, slots=True)
class Resolution:
    """What the selectors matched, and the Ready verdict with its reason and message."""

    subnets: tuple[Obj, ...] = ()
    security_groups: tuple[Obj, ...] = ()
    amis: tuple[Obj, ...] = ()
    capacity_reservations: tuple[Obj, ...] = ()
    instance_profile: str | None = None
    ready: bool = False
    reason: str = ""
    message: str = ""

    def status(self) -> Obj:
        """The ``status`` fields (without conditions), as the CRD spells them."""
        out: Obj = {
            "subnets": list(self.subnets),
            "securityGroups": list(self.security_groups),
            "amis": list(self.amis),
            "capacityReservations": list(self.capacity_reservations),
        }
        if self.instance_profile:
            out["instanceProfile"] = self.instance_profile
        return out


@dataclass(frozen=True, slots=True)
class ResolvedNodeClass:
    """An EC2NodeClass as the provider reads it from the cluster (spec + resolved status)."""

    name: str
    model: EC2NodeClass
    subnets: tuple[Obj, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    amis: tuple[Obj, ...] = ()
    capacity_reservations: tuple[Obj, ...] = ()
    instance_profile: str | None = None
    ready: bool = False
    message: str = ""
    generation: int = 0
    zones: tuple[str, ...] = field(default=())


def resolved_view(obj: Obj) -> ResolvedNodeClass:
    """Read an EC2NodeClass object (ValueError naming the field when its spec is invalid)."""
    try:
        model = EC2NodeClass.model_validate(obj)
    except ValidationError as err:
        raise ValueError(str(err)) from None
    status = obj.get("status") or {}
    ready, message = False, "its status has not been resolved yet"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
            message = str(cond.get("message") or cond.get("reason") or "")
    subnets = tuple(s for s in status.get("subnets") or [] if s.get("id"))
    return ResolvedNodeClass(
        name=model.name,
        model=model,
        subnets=subnets,
        security_group_ids=tuple(str(g["id"]) for g in status.get("securityGroups") or [] if g.get("id")),
        amis=tuple(a for a in status.get("amis") or [] if a.get("id")),
        capacity_reservations=tuple(status.get("capacityReservations") or []),
        instance_profile=status.get("instanceProfile"),
        ready=ready,
        message=message,
        generation=int((obj.get("metadata") or {}).get("generation") or 0),
        zones=tuple(sorted({str(s.get("zone")) for s in subnets if s.get("zone")})),
    )


def _tag_filters(tags: dict[str, str]) -> list[Obj]:
    out: list[Obj] = []
    for key, value in sorted(tags.items()):
        if value == "*":
            out.append({"Name": "tag-key", "Values": [key]})
        else:
            out.append({"Name": f"tag:{key}", "Values": [value]})
    return out


async def _subnets(api: AWSApi, terms: list[SubnetSelectorTerm]) -> list[Obj]:
    found: dict[str, Obj] = {}
    for term in terms:
        if term.id:
            params: Obj = {"Filters": [{"Name": "subnet-id", "Values": [term.id]}]}
        else:
            params = {"Filters": _tag_filters(term.tags or {})}
        for s in await api.collect("ec2", "describe_subnets", key="Subnets", **params):
            found[s["SubnetId"]] = {"id": s["SubnetId"], "zone": s["AvailabilityZone"]} | (
                {"zoneID": s["AvailabilityZoneId"]} if s.get("AvailabilityZoneId") else {}
            )
    return [found[k] for k in sorted(found)]


async def _security_groups(api: AWSApi, terms: list[SecurityGroupSelectorTerm]) -> list[Obj]:
    found: dict[str, Obj] = {}
    for term in terms:
        if term.id:
            params: Obj = {"Filters": [{"Name": "group-id", "Values": [term.id]}]}
        elif term.name:
            params = {"Filters": [{"Name": "group-name", "Values": [term.name]}]}
        else:
            params = {"Filters": _tag_filters(term.tags or {})}
        for g in await api.collect("ec2", "describe_security_groups", key="SecurityGroups", **params):
            found[g["GroupId"]] = {"id": g["GroupId"], "name": g.get("GroupName")}
    return [found[k] for k in sorted(found)]


def _ami_params(term: AMISelectorTerm) -> Obj:
    if term.id:
        return {"ImageIds": [term.id]}
    if term.alias:
        family, _, version = term.alias.partition("@")
        names = [
            n if version == "latest" else n.replace("*", f"*{version.lstrip('v')}*") for n in ALIAS_IMAGE_NAMES[family]
        ]
        return {"Owners": [ALIAS_OWNERS[family]], "Filters": [{"Name": "name", "Values": names}]}
    by_name = [{"Name": "name", "Values": [term.name]}]
    params: Obj = {"Filters": _tag_filters(term.tags) if term.tags else by_name}
    if term.owner:
        params["Owners"] = [term.owner]
    return params


def variant_of(image_name: str) -> str:
    """``nvidia``, ``neuron`` or ``standard``: which accelerators an image's drivers serve."""
    lowered = image_name.lower()
    if "nvidia" in lowered or "gpu" in lowered:
        return "nvidia"
    if "neuron" in lowered:
        return "neuron"
    return "standard"


async def _describe_images(api: AWSApi, params: Obj) -> list[Obj]:
    try:
        return await api.collect("ec2", "describe_images", key="Images", **params)
    except AWSError as err:
        if not err.code.startswith("InvalidAMIID"):
            raise
    ids = params.get("ImageIds") or []
    if len(ids) <= 1:
        return []
    out: list[Obj] = []  # one of several is gone: ask for each, keep those that exist
    for image in ids:
        out += await _describe_images(api, {"ImageIds": [image]})
    return out


async def _amis(api: AWSApi, terms: list[AMISelectorTerm], *, kubernetes_version: str | None = None) -> list[Obj]:
    """The matching images, newest first, at most the newest of each (architecture, variant). The
    ``al2023`` and ``bottlerocket`` aliases are read from AWS's SSM parameters for the cluster's
    Kubernetes version; ValueError (NO_VERSION) when it is unknown."""
    found: dict[str, Obj] = {}
    for term in terms:
        if term.alias and term.alias.partition("@")[0] in SSM_ALIASES:
            if not kubernetes_version:
                raise ValueError(NO_VERSION)
            ids = await alias_image_ids(api, term.alias, kubernetes_version)
            params: Obj = {"ImageIds": ids}
            if not ids:
                continue
        else:
            params = _ami_params(term)
        images = await _describe_images(api, params)
        for image in images:
            if image.get("State", "available") != "available":
                continue
            arch = {"x86_64": "amd64", "arm64": "arm64"}.get(str(image.get("Architecture")), "amd64")
            found[image["ImageId"]] = {
                "id": image["ImageId"],
                "name": image.get("Name") or "",
                "architecture": arch,
                "creationDate": image.get("CreationDate") or "",
            }
    newest: dict[tuple[str, str], Obj] = {}
    for image in sorted(found.values(), key=lambda i: (i["creationDate"], i["id"]), reverse=True):
        newest.setdefault((image["architecture"], variant_of(image["name"])), image)
    return sorted(newest.values(), key=lambda i: (i["creationDate"], i["id"]), reverse=True)


async def _reservations(api: AWSApi, terms: list[CapacityReservationSelectorTerm]) -> list[Obj]:
    found: dict[str, Obj] = {}
    for term in terms:
        params: Obj = {"Filters": [{"Name": "state", "Values": ["active"]}]}
        if term.id:
            params["CapacityReservationIds"] = [term.id]
        else:
            params["Filters"] += _tag_filters(term.tags or {})
        if term.owner_id:
            params["Filters"].append({"Name": "owner-id", "Values": [term.owner_id]})
        for cr in await api.collect("ec2", "describe_capacity_reservations", key="CapacityReservations", **params):
            entry: Obj = {
                "id": cr["CapacityReservationId"],
                "instanceType": cr["InstanceType"],
                "availabilityZone": cr["AvailabilityZone"],
                "availableInstanceCount": int(cr.get("AvailableInstanceCount") or 0),
                "totalInstanceCount": int(cr.get("TotalInstanceCount") or 0),
                "reservationType": "capacity-block" if cr.get("ReservationType") == "capacity-block" else "default",
            }
            if cr.get("EndDate"):
                entry["endTime"] = str(cr["EndDate"])
            found[entry["id"]] = entry
    return [found[k] for k in sorted(found)]


def instance_profile_name(*, cluster: str, nodeclass: str, role: str) -> str:
    digest = hashlib.sha256(f"{cluster}/{nodeclass}/{role}".encode()).hexdigest()[:10]
    return f"joiner-{cluster}-{digest}"[:128]


async def _instance_profile(
    api: AWSApi, model: EC2NodeClass, *, cluster: str, create: bool = True
) -> tuple[str | None, str, str]:
    """(profile, reason, message): the profile to use, or None with why not. Without ``create``
    the profile a role needs is only named, not made."""
    spec = model.spec
    if spec.instance_profile:
        try:
            await api.call("iam", "get_instance_profile", InstanceProfileName=spec.instance_profile)
        except AWSError as err:
            if err.code == "NoSuchEntity":
                return None, "InstanceProfileNotFound", f"instance profile {spec.instance_profile!r} does not exist"
            raise
        return spec.instance_profile, "", ""
    role = str(spec.role)
    try:
        await api.call("iam", "get_role", RoleName=role.rsplit("/", 1)[-1])
    except AWSError as err:
        if err.code == "NoSuchEntity":
            return None, "RoleNotFound", f"IAM role {role!r} (spec.role) does not exist"
        raise
    name = instance_profile_name(cluster=cluster, nodeclass=model.name, role=role)
    if not create:
        return name, "", ""
    try:
        answer = await api.call("iam", "get_instance_profile", InstanceProfileName=name)
        roles = [r.get("RoleName") for r in (answer.get("InstanceProfile") or {}).get("Roles") or []]
    except AWSError as err:
        if err.code != "NoSuchEntity":
            raise
        await api.call(
            "iam",
            "create_instance_profile",
            InstanceProfileName=name,
            Tags=[
                {"Key": "joiner.sh/cluster", "Value": cluster},
                {"Key": "joiner.sh/ec2nodeclass", "Value": model.name},
            ],
        )
        roles = []
    if role.rsplit("/", 1)[-1] not in roles:
        for old in roles:
            await api.call("iam", "remove_role_from_instance_profile", InstanceProfileName=name, RoleName=old)
        await api.call(
            "iam", "add_role_to_instance_profile", InstanceProfileName=name, RoleName=role.rsplit("/", 1)[-1]
        )
    return name, "", ""


async def resolve(
    api: AWSApi,
    model: EC2NodeClass,
    *,
    cluster: str,
    kubernetes_version: str | None = None,
    create_profile: bool = True,
) -> Resolution:
    """Ask AWS what the selectors match; never raises for an AWS error (ResolutionFailed instead).
    ``kubernetes_version`` (``1.31``) picks the images of an alias."""
    spec = model.spec
    no_version = ""
    try:
        subnets = await _subnets(api, spec.subnet_selector_terms)
        groups = await _security_groups(api, spec.security_group_selector_terms)
        terms = spec.ami_selector_terms or [AMISelectorTerm(alias=f"{(spec.ami_family or 'AL2023').lower()}@latest")]
        try:
            amis = await _amis(api, terms, kubernetes_version=kubernetes_version)
        except ValueError as err:
            amis, no_version = [], str(err)
        reservations = (
            await _reservations(api, spec.capacity_reservation_selector_terms)
            if spec.capacity_reservation_selector_terms
            else []
        )
        profile, why, message = await _instance_profile(api, model, cluster=cluster, create=create_profile)
    except AWSError as err:
        return Resolution(ready=False, reason="ResolutionFailed", message=f"AWS refused a lookup: {err}")
    found = Resolution(
        subnets=tuple(subnets),
        security_groups=tuple(groups),
        amis=tuple(amis),
        capacity_reservations=tuple(reservations),
        instance_profile=profile,
    )
    problems: list[tuple[str, str]] = []
    if not subnets:
        problems.append(("SubnetsNotFound", "no subnet matches spec.subnetSelectorTerms"))
    if not groups:
        problems.append(("SecurityGroupsNotFound", "no security group matches spec.securityGroupSelectorTerms"))
    if not amis:
        said = f" (images of an alias: for Kubernetes {kubernetes_version})" if kubernetes_version else ""
        problems.append(("AMINotFound", no_version or f"no image matches spec.amiSelectorTerms{said}"))
    if profile is None:
        problems.append((why, message))
    if problems:
        return Resolution(
            subnets=found.subnets,
            security_groups=found.security_groups,
            amis=found.amis,
            capacity_reservations=found.capacity_reservations,
            instance_profile=profile,
            ready=False,
            reason=problems[0][0],
            message="; ".join(m for _, m in problems),
        )
    return Resolution(
        subnets=found.subnets,
        security_groups=found.security_groups,
        amis=found.amis,
        capacity_reservations=found.capacity_reservations,
        instance_profile=profile,
        ready=True,
        reason="Resolved",
        message=(
            f"{len(subnets)} subnet(s) in {len({s['zone'] for s in subnets})} zone(s), {len(groups)} security "
            f"group(s), {len(amis)} image(s), {len(reservations)} capacity reservation(s)"
        ),
    )
