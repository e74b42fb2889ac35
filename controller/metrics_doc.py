"""Generates the metric reference in docs/metrics.md from the code: imports every controller module
(each declares its metrics when imported) and writes one table row per metric between the
markers; `--check` fails when the file differs (run by `make lint`)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

import controller
from controller.metrics import DECLARED, MetricSpec

BEGIN = "<!-- BEGIN GENERATED METRICS (python -m controller.metrics_doc) -->"
END = "<!-- END GENERATED METRICS -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
SKIP = frozenset({"controller.cli", "controller.metrics_doc"})


def load_all() -> dict[str, MetricSpec]:
    """Every metric the controller declares (importing each module of the package once)."""
    for info in pkgutil.walk_packages(controller.__path__, prefix="controller."):
        if info.name not in SKIP and not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    return dict(DECLARED)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def table(specs: dict[str, MetricSpec]) -> str:
    rows = [
        "| metric | type | labels | help |",
        "|---|---|---|---|",
    ]
    for name in sorted(specs):
        spec = specs[name]
        labels = ", ".join(f"`{label}`" for label in spec.labels)
        rows.append(f"| `{name}` | {spec.type} | {labels} | {_cell(spec.help)} |")
    return "\n".join(rows)


def render(doc: str, specs: dict[str, MetricSpec]) -> str:
    """The document with the generated section replaced (markers kept)."""
    if BEGIN not in doc or END not in doc:
        raise ValueError(f"docs/metrics.md needs the markers {BEGIN!r} and {END!r}")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table(specs)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if docs/metrics.md is out of date")
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args(argv)
    current = args.doc.read_text()
    wanted = render(current, load_all())
    if args.check:
        if current != wanted:
            print(f"{args.doc} is out of date: run python -m controller.metrics_doc", file=sys.stderr)
            return 1
        return 0
    args.doc.write_text(wanted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
