"""Strict decoding: what ``kubectl apply`` refuses, ``joiner plan`` and the catalog readers refuse
too, in one line naming the document, the key and the line."""

from __future__ import annotations

import json

import pytest

from controller.cloudprovider.catalog import builtin_catalog_text, parse_catalog_text
from controller.plan import execute
from controller.scheduling import CatalogError
from controller.strict import checked_kinds, path_parts, path_text, unknown_field

POD = """apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {anything.example.com/goes: "yes"}
  annotations: {free-form: "yes", also: "this"}
spec:
  nodeSelector: {team: web}
  containers:
    - name: c
      resources:
        requests: {cpu: '1', memory: 1Gi}
"""


def error_of(text: str) -> str:
    outcome = execute([("s.yaml", text)])
    assert outcome.code == 1, outcome.out
    assert outcome.err.count("\n") == 1
    return outcome.err


def test_a_clean_pod_with_free_form_maps_plans() -> None:
    outcome = execute([("s.yaml", POD)])
    assert outcome.code == 0, outcome.err


def test_a_duplicate_request_is_refused_with_its_line() -> None:
    text = POD.replace("requests: {cpu: '1', memory: 1Gi}", "requests: {cpu: '1', cpu: '64'}")
    assert error_of(text) == (
        "error: s.yaml: document 1: line 12: duplicate key 'cpu' in spec.containers[0].resources.requests "
        "(kubectl refuses it too)\n"
    )


def test_a_duplicate_key_in_a_later_document_names_that_document() -> None:
    text = POD + "---\n" + POD.replace("  name: web\n", "  name: api\n  name: api2\n")
    assert error_of(text).startswith("error: s.yaml: document 2: line 18: duplicate key 'name' in metadata")


def test_an_unknown_pod_field_is_refused_with_its_path_and_line() -> None:
    text = POD.replace("      resources:", "      resourcs:")
    assert error_of(text) == (
        "error: s.yaml: document 1 (Pod 'web'): line 11: unknown field \"spec.containers[0].resourcs\" "
        "(kubectl refuses it too)\n"
    )


def test_an_unknown_field_in_a_list_item_and_a_workload_template() -> None:
    listed = "apiVersion: v1\nkind: List\nitems:\n- " + POD.replace("\n", "\n  ").replace("nodeSelector", "nodeSelectr")
    assert 'line 11: unknown field "spec.nodeSelectr"' in error_of(listed)
    deployment = """apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  replicas: 2
  template:
    spec:
      containers: [{name: c, image: x}]
      tolerations: [{key: a, operatr: Exists}]
"""
    assert 'line 9: unknown field "spec.template.spec.tolerations[0].operatr"' in error_of(deployment)


def test_an_unknown_nodepool_field_names_its_line() -> None:
    pool = """apiVersion: joiner.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: joiner.sh, kind: KWOKNodeClass, name: default}
      requirments: []
"""
    assert error_of(pool) == (
        "error: s.yaml: document 1 (NodePool 'gpu'): line 8: invalid: spec.template.spec.requirments: unknown field\n"
    )


def test_a_catalog_configmap_with_an_unknown_offering_field() -> None:
    catalog = json.loads(builtin_catalog_text())
    catalog["instanceTypes"] = catalog["instanceTypes"][:1]
    catalog["instanceTypes"][0]["offerings"][0]["avialable"] = True
    text = json.dumps(catalog, indent=1)
    with pytest.raises(CatalogError) as err:
        parse_catalog_text(text, source="ConfigMap default/catalog")
    line = next(i for i, row in enumerate(text.splitlines(), start=1) if "avialable" in row)
    assert str(err.value).startswith(f"ConfigMap default/catalog: line {line}: instanceTypes[0] (")
    assert 'offerings[0]: unknown field "avialable"' in str(err.value)


def test_a_catalog_with_a_key_twice() -> None:
    with pytest.raises(CatalogError, match=r"^cat.json: line 2: duplicate key 'cpu' in instanceTypes\[0\].capacity$"):
        parse_catalog_text(
            '{"instanceTypes": [{"name": "a", "capacity": {"cpu": "2",\n"cpu": "4"}}]}', source="cat.json"
        )


def test_the_field_table_covers_the_kinds_joiner_plan_reads() -> None:
    assert checked_kinds() == {
        "Pod",
        "Deployment",
        "StatefulSet",
        "ReplicaSet",
        "Job",
        "DaemonSet",
        "Node",
        "ConfigMap",
        "PersistentVolumeClaim",
        "PersistentVolume",
        "StorageClass",
    }
    assert unknown_field({"kind": "ConfigMap", "data": {"catalog.json": "{}"}, "metadata": {"name": "x"}}) is None
    assert unknown_field({"kind": "Node", "status": {"allocatable": {"cpu": "1"}, "capacityy": {}}}) == [
        "status",
        "capacityy",
    ]
    parts: list[str | int] = ["spec", "containers", 0, "resourcs"]
    assert path_parts(path_text(parts)) == parts


def test_the_quick_check_and_the_ordered_walk_agree_on_every_field() -> None:
    """`_all_known` (one set comparison per object) passes exactly the objects in which the walk in
    document order finds no unknown field: for every key of a clean pod (object, list item, map
    value, free-form map), the pod with that key misspelt or made a number."""
    import copy

    from controller.strict import _all_known

    clean: dict[str, object] = {
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": {"team": "web"},
                    "containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "1"}}, "ports": [{"containerPort": 80}]}
                    ],
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}
                    ]}},
                    "tolerations": [{"key": "a", "operator": "Exists"}],
                    "volumes": [{"name": "v", "emptyDir": None}],
                },
            },
        },
    }  # fmt: skip
    assert unknown_field(clean) is None
    assert _all_known(clean, "V1Deployment")

    def paths(value: object, at: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        out: list[tuple[object, ...]] = []
        if isinstance(value, dict):
            for k, v in value.items():
                out.append((*at, k))
                out.extend(paths(v, (*at, k)))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                out.extend(paths(v, (*at, i)))
        return out

    checked = 0
    for path in paths(clean):
        if path == ("kind",):  # (without its kind, an object is not checked)
            continue
        for bad in (f"{path[-1]}x", 7):
            doc = copy.deepcopy(clean)
            parent: object = doc
            for step in path[:-1]:
                parent = parent[step]  # type: ignore[index]
            assert isinstance(parent, dict)
            parent[bad] = parent.pop(path[-1])
            found = unknown_field(doc)
            assert _all_known(doc, "V1Deployment") == (found is None), (path, bad, found)
            checked += found is not None
    assert checked > 20  # most keys are the kind's own; the free-form maps' keys are the user's
