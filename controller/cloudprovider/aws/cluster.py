"""How the machines joiner launches reach the cluster: the endpoint, CA bundle and service CIDR the
bootstrap user data needs, and the Kubernetes version the images are chosen for. The operator's
``--cluster-endpoint/--cluster-ca-bundle/--cluster-cidr/--cluster-version`` win; what they leave out
comes from EKS ``DescribeCluster`` (asked until it answers, then cached).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from controller.cloudprovider.aws.api import AWSApi, AWSError
from controller.cloudprovider.aws.bootstrap import ClusterInfo
from controller.cloudprovider.types import CreateError

__all__ = ["ClusterInfoSource", "ClusterSettings"]

log = structlog.get_logger()
Obj = dict[str, Any]
FLAGS = "give --cluster-endpoint, --cluster-ca-bundle and --cluster-cidr"


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """What the operator said of the cluster (``--cluster-endpoint`` ...); the rest comes from EKS."""

    endpoint: str | None = None
    ca_bundle: str | None = None
    service_cidr: str | None = None
    version: str | None = None  # the Kubernetes minor, "1.31"


class ClusterInfoSource:
    def __init__(self, api: AWSApi, cluster_name: str, settings: ClusterSettings | None = None) -> None:
        self._api = api
        self._name = cluster_name
        self._settings = settings or ClusterSettings()
        self._info: ClusterInfo | None = None
        self._described: Obj | None = None

    async def describe(self) -> Obj:
        """EKS DescribeCluster's ``cluster`` (AWSError when it fails; a success is kept)."""
        if self._described is None:
            self._described = (await self._api.call("eks", "describe_cluster", name=self._name)).get("cluster") or {}
        return self._described

    async def version(self) -> str | None:
        """The cluster's Kubernetes version (``1.31``): ``--cluster-version``, else DescribeCluster's;
        None when neither says (DescribeCluster refused or the cluster is not EKS)."""
        if self._settings.version:
            return self._settings.version
        try:
            found = await self.describe()
        except AWSError as err:
            log.warning("aws.cluster_version_unknown", cluster=self._name, code=err.code, error=err.message)
            return None
        return str(found.get("version") or "") or None

    async def get(self) -> ClusterInfo:
        """The cluster's endpoint, CA and service CIDR; CreateError when they cannot be known."""
        if self._info is not None:
            return self._info
        given = self._settings
        endpoint, ca, cidr = given.endpoint, given.ca_bundle, given.service_cidr
        if not (endpoint and ca and cidr):
            try:
                found = await self.describe()
            except AWSError as err:
                raise CreateError(
                    f"cannot write the bootstrap user data: EKS DescribeCluster {self._name!r} failed "
                    f"({err.code}: {err.message}); {FLAGS}",
                    reason=err.code,
                ) from None
            endpoint = endpoint or str(found.get("endpoint") or "")
            ca = ca or str((found.get("certificateAuthority") or {}).get("data") or "")
            cidr = cidr or str((found.get("kubernetesNetworkConfig") or {}).get("serviceIpv4Cidr") or "")
        if not (endpoint and ca and cidr):
            raise CreateError(
                f"cannot write the bootstrap user data: the cluster endpoint, CA bundle or service CIDR of "
                f"{self._name!r} is unknown; {FLAGS}",
                reason="ClusterInfoMissing",
            )
        self._info = ClusterInfo(name=self._name, endpoint=endpoint, ca_bundle=ca, service_cidr=cidr)
        return self._info
