"""The chart's RBAC against the calls the controller makes, both ways: every API call in
`controller/` (found by reading the code) is allowed, and no rule grants what no call uses."""

from __future__ import annotations

import ast
from pathlib import Path

from controller.kube import resources
from controller.kube.resources import (
    AKSNODECLASSES,
    EC2NODECLASSES,
    GCENODECLASSES,
    PODTEMPLATES,
    PROVISIONING_REQUESTS,
    Resource,
)
from controller.state.cluster import WATCHED
from tests.helm.conftest import ROOT
from tests.helm.test_chart import render

VERBS = {
    "get": "get",
    "list": "list",
    "watch": "watch",
    "create": "create",
    "replace": "update",
    "patch": "patch",
    "delete": "delete",
}
# calls whose resource is a variable: where it comes from
DYNAMIC = {
    "controller/gang/podgroups.py": [
        ("scheduling.x-k8s.io", "podgroups", "get"),
        ("scheduling.volcano.sh", "podgroups", "get"),
    ],
    # the one status write of the NodeClass status loops, for the kind each loop names
    "controller/nodeclass/loop.py": [
        (r.group, f"{r.plural}/status", "patch") for r in (EC2NODECLASSES, GCENODECLASSES, AKSNODECLASSES)
    ],
}
# the commands a user runs with their own credentials, not the controller's
NOT_THE_CONTROLLER = {"controller/cli.py", "controller/plan.py"}


def _constants() -> dict[str, Resource]:
    found = {name: value for name, value in vars(resources).items() if isinstance(value, Resource)}
    from controller.gang import podgroups

    found.update({n: v for n, v in vars(podgroups).items() if isinstance(v, Resource)})
    return found


def calls_in_code() -> tuple[set[tuple[str, str, str]], list[str]]:
    """(group, resource[/subresource], verb) of every client call, and call sites that could not be read."""
    constants = _constants()
    needed: set[tuple[str, str, str]] = set()
    unknown: list[str] = []
    for path in sorted((ROOT / "controller").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in NOT_THE_CONTROLLER or rel == "controller/kube/client.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = ast.unparse(node.func.value)
            if not owner.endswith("client"):
                continue
            method = node.func.attr
            if method == "evict":
                needed.add(("", "pods/eviction", "create"))
                continue
            if method not in VERBS or not node.args:
                continue
            arg = node.args[0]
            name = arg.id if isinstance(arg, ast.Name) else None
            res = constants.get(name) if name else None
            if res is None:
                if rel in DYNAMIC:
                    needed.update(DYNAMIC[rel])
                else:
                    unknown.append(f"{rel}:{node.lineno} {ast.unparse(node)[:80]}")
                continue
            sub = next((k.value for k in node.keywords if k.arg == "subresource"), None)
            subresource = sub.value if isinstance(sub, ast.Constant) and isinstance(sub.value, str) else None
            plural = f"{res.plural}/{subresource}" if subresource else res.plural
            needed.add((res.group, plural, VERBS[method]))
    # the informers: the providers' NodeClasses; ProvisioningRequests and their pod templates when their
    # CRD is installed
    for res in (*WATCHED, EC2NODECLASSES, GCENODECLASSES, AKSNODECLASSES, PROVISIONING_REQUESTS, PODTEMPLATES):
        needed.add((res.group, res.plural, "list"))
        needed.add((res.group, res.plural, "watch"))
    return needed, unknown


def granted(tools: Path) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for doc in render(tools):
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((group, resource, verb))
    return out


def test_every_call_the_controller_makes_is_allowed_and_every_rule_is_used(tools: Path) -> None:
    needed, unknown = calls_in_code()
    assert unknown == [], "client calls whose resource the test cannot tell; add them to DYNAMIC"
    have = granted(tools)
    missing = sorted(needed - have)
    unused = sorted(have - needed)
    assert missing == [], f"calls the chart's RBAC forbids: {missing}"
    assert unused == [], f"rules no call uses (least privilege): {unused}"
