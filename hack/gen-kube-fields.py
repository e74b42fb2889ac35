"""Writes controller/kube_fields.json: the field names of the Kubernetes kinds ``joiner plan`` reads
(Pod, Deployment, StatefulSet, ReplicaSet, Job, DaemonSet, Node, ConfigMap, PersistentVolumeClaim,
PersistentVolume, StorageClass), taken from the
kubernetes_asyncio client's models, so that strict decoding (controller/strict.py) refuses an
unknown field as ``kubectl apply`` does without importing the client at run time.

    .venv/bin/python hack/gen-kube-fields.py           # rewrite the file
    .venv/bin/python hack/gen-kube-fields.py --check   # fail if it is out of date (make lint)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import kubernetes_asyncio
from kubernetes_asyncio.client import models

OUT = Path(__file__).resolve().parents[1] / "controller" / "kube_fields.json"
KINDS = {
    "Pod": "V1Pod",
    "Deployment": "V1Deployment",
    "StatefulSet": "V1StatefulSet",
    "ReplicaSet": "V1ReplicaSet",
    "Job": "V1Job",
    "DaemonSet": "V1DaemonSet",
    "Node": "V1Node",
    "ConfigMap": "V1ConfigMap",
    "PersistentVolumeClaim": "V1PersistentVolumeClaim",
    "PersistentVolume": "V1PersistentVolume",
    "StorageClass": "V1StorageClass",
}
_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(str, (.+)\)$")


def _shape(type_name: str) -> tuple[str, str | None]:
    """("list" | "map" | "one", the model it holds or None for scalars and free objects)."""
    for kind, pattern in (("list", _LIST), ("map", _DICT)):
        m = pattern.match(type_name)
        if m:
            inner = m.group(1)
            return kind, inner if hasattr(models, inner) else None
    return "one", type_name if hasattr(models, type_name) else None


def build() -> dict[str, Any]:
    types: dict[str, dict[str, str]] = {}
    todo = list(KINDS.values())
    while todo:
        name = todo.pop()
        if name in types:
            continue
        model = getattr(models, name)
        fields: dict[str, str] = {}
        for attr, type_name in sorted(model.openapi_types.items()):
            kind, inner = _shape(type_name)
            fields[model.attribute_map[attr]] = "" if inner is None else (inner if kind == "one" else f"{kind}:{inner}")
            if inner is not None:
                todo.append(inner)
        types[name] = fields
    return {
        "source": f"kubernetes_asyncio {kubernetes_asyncio.__version__} (hack/gen-kube-fields.py)",
        "kinds": KINDS,
        "types": dict(sorted(types.items())),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    args = parser.parse_args()
    text = json.dumps(build(), indent=1, sort_keys=False) + "\n"
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is out of date: run .venv/bin/python hack/gen-kube-fields.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
