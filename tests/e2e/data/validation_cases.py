"""Loads the malformed-object cases of invalid_objects.yaml (shared by unit and e2e tests)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DATA_DIR = Path(__file__).resolve().parent
INVALID_OBJECTS = DATA_DIR / "invalid_objects.yaml"
KARPENTER_NODEPOOL = DATA_DIR / "karpenter_nodepool.yaml"


@dataclass(frozen=True)
class InvalidCase:
    """A malformed object and the texts its rejection must contain."""

    name: str
    manifest: dict[str, Any]
    expect: tuple[str, ...]

    @property
    def kind(self) -> str:
        kind: str = self.manifest["kind"]
        return kind


def _segments(path: str) -> list[str | int]:
    return [int(part) if part.isdigit() else part for part in path.split(".")]


def _parent(obj: Any, path: list[str | int]) -> Any:
    for part in path[:-1]:
        obj = obj[part] if isinstance(part, int) else obj.setdefault(part, {})
    return obj


def _substitute(item: Any, i: int) -> Any:
    if isinstance(item, str):
        return item.replace("{i}", str(i))
    if isinstance(item, dict):
        return {key: _substitute(value, i) for key, value in item.items()}
    if isinstance(item, list):
        return [_substitute(value, i) for value in item]
    return item


def _build(base: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(base)
    obj["metadata"]["name"] = f"invalid-{raw['name']}"
    for path, value in raw.get("set", {}).items():
        segments = _segments(path)
        _parent(obj, segments)[segments[-1]] = copy.deepcopy(value)
    for path in raw.get("unset", []):
        segments = _segments(path)
        del _parent(obj, segments)[segments[-1]]
    if "repeat" in raw:
        repeat = raw["repeat"]
        segments = _segments(repeat["path"])
        _parent(obj, segments)[segments[-1]] = [_substitute(repeat["item"], i) for i in range(repeat["count"])]
    return obj


def load_bases() -> dict[str, dict[str, Any]]:
    """The valid base objects the cases start from, by name."""
    data = yaml.safe_load(INVALID_OBJECTS.read_text(encoding="utf-8"))
    bases: dict[str, dict[str, Any]] = data["bases"]
    return bases


def load_invalid_cases() -> list[InvalidCase]:
    """Every malformed-object case, in file order."""
    data = yaml.safe_load(INVALID_OBJECTS.read_text(encoding="utf-8"))
    bases = data["bases"]
    return [
        InvalidCase(name=raw["name"], manifest=_build(bases[raw["base"]], raw), expect=tuple(raw["expect"]))
        for raw in data["cases"]
    ]


def load_karpenter_nodepool() -> dict[str, Any]:
    """The karpenter.sh/v1 NodePool test fixture, unchanged."""
    manifest: dict[str, Any] = yaml.safe_load(KARPENTER_NODEPOOL.read_text(encoding="utf-8"))
    return manifest


def convert_karpenter_nodepool(manifest: dict[str, Any], *, node_class: str = "default") -> dict[str, Any]:
    """What a user does to move a Karpenter NodePool to joiner: apiVersion and nodeClassRef only."""
    converted = copy.deepcopy(manifest)
    converted["apiVersion"] = "joiner.sh/v1"
    converted["spec"]["template"]["spec"]["nodeClassRef"] = {
        "group": "joiner.sh",
        "kind": "KWOKNodeClass",
        "name": node_class,
    }
    return converted
